//go:build !unix

package boltstore

import "time"

// processCPU is not measured off Unix; the benchmark then omits the metric.
func processCPU() (time.Duration, bool) { return 0, false }
