//go:build !linux

package serve

// Other systems have no parent-death signal; the agent is built for Linux
// (systemd units and containers), where parentdeath_linux.go applies.

func bindToParent() (func(), error) { return func() {}, nil }
