// Command bench measures leasekeeper against what its users would pick
// instead, side by side in one run on one machine, and writes the table to
// docs/BENCHMARKS.md.
//
//	cd bench && go run . [-scenarios claim,heartbeat,reaper,claimlost,plugin,mongo,lifecycle] [-repeat 5] [-out ../docs/BENCHMARKS.md]
//	cd bench && go run . -smoke   # seconds; prints the table, writes nothing
//
// It lives in its own module so that the embedded etcd it compares against,
// and its dependencies, never reach the agent binary.
//
// Every figure is measured in the run that prints it. Each scenario is
// repeated; the table gives the median and the spread (min–max) of the
// repeats, and a ratio against the scenario's anchor measured in the same
// repeat loop, so a machine that is busy slows both sides alike. The
// variants of a scenario are interleaved within each repeat for the same
// reason.
package main
