package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// sample is the repeats of one measured figure.
type sample []float64

func (s sample) sorted() []float64 {
	c := slices.Clone([]float64(s))
	slices.Sort(c)
	return c
}

func (s sample) median() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := s.sorted()
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

func (s sample) min() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	return slices.Min(s)
}

func (s sample) max() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	return slices.Max(s)
}

// percentile returns the q-quantile (0..1) by nearest rank.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	c := slices.Clone(ds)
	slices.Sort(c)
	i := int(math.Ceil(q*float64(len(c)))) - 1
	return c[max(0, min(i, len(c)-1))]
}

// num formats a figure with a precision that suits its size.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "n/a"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
