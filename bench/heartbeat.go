package main

import "context"

const childFlag = "-bench-child"

func childMain(args []string) int { return 2 }

func runHeartbeat(_ context.Context, _ config, rep *report) error { return nil }
func runReaper(_ context.Context, _ config, rep *report) error    { return nil }
func runClaimLost(_ context.Context, _ config, rep *report) error { return nil }
