package main

import (
	"fmt"

	"github.com/spf13/cobra"

	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// newStoreCmd groups the commands that work on a stopped agent's bbolt
// board file directly (DESIGN.md#wal).
func newStoreCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "store",
		Short: "Work on a stopped agent's bbolt board file",
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newStoreDiscardWALCmd())
	return c
}

func newStoreDiscardWALCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "discard-wal FILE --yes",
		Short: "Start FILE without its damaged or lost write-ahead log",
		Long: `Move the write-ahead log of the bbolt board file FILE (the directory
FILE.wal) aside and mark FILE as holding everything, so the agent starts
from FILE alone with a new log.

Only for a log the agent refuses to start with (damaged, or missing after
an unclean stop) and that no backup can replace. What the log held beyond
the board file's last checkpoint is lost: cards, runs and verdicts written
in the last moments, and claims granted since. A claim's epoch may be
granted again, which breaks the fence for any worker still holding it.
Stop every worker of the board first. The agent must be stopped (the
command takes the file's lock). The log is moved, not deleted.`,
		Args: exactArgs(1, "FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				return usageError("discard-wal loses the writes the log holds beyond the last checkpoint; stop every worker of the board, then run it again with --yes")
			}
			moved, err := boltstore.DiscardWAL(args[0], 0)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if moved != "" {
				fmt.Fprintf(out, "moved the write-ahead log aside to %s\n", moved)
			} else {
				fmt.Fprintf(out, "there was no write-ahead log beside %s\n", args[0])
			}
			fmt.Fprintf(out, "%s will open with a new log on the agent's next start\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm: every worker of the board is stopped and the lost writes are accepted")
	return cmd
}
