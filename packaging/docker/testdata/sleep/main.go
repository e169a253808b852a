// Command sleep blocks until it is signalled: the stand-in worker command
// of the container tests, for images that have no shell and no sleep.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
