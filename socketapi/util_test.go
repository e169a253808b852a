package socketapi_test

import (
	"fmt"
	"strconv"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// fmtSscanf reads the status code from an HTTP status line.
func fmtSscanf(line string, code *int) (int, error) {
	var proto string
	return fmt.Sscanf(line, "%s %d", &proto, code)
}
