package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// row is one measured figure of a scenario, with its repeats.
type row struct {
	name   string
	unit   string
	vals   sample
	anchor *row // the figure this one is compared with, nil for none
	note   string
}

// ratio is this row's figure over its anchor's. When both have one value
// per repeat the ratio is taken per repeat (the two were measured next to
// each other) and the median of those is returned, with their spread.
func (r *row) ratio() (med, lo, hi float64) {
	a := r.anchor
	if a == nil || len(a.vals) == 0 || len(r.vals) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	if len(a.vals) != len(r.vals) {
		m := r.vals.median() / a.vals.median()
		return m, m, m
	}
	var rs sample
	for i := range r.vals {
		rs = append(rs, r.vals[i]/a.vals[i])
	}
	return rs.median(), rs.min(), rs.max()
}

// section is one scenario's table.
type section struct {
	title string
	intro string
	rows  []*row
	notes []string
}

func (s *section) add(name, unit string, anchor *row) *row {
	r := &row{name: name, unit: unit, anchor: anchor}
	s.rows = append(s.rows, r)
	return r
}

func (s *section) notef(format string, args ...any) {
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
}

// goal is one target of the benchmarks, judged on measured figures.
type goal struct {
	scenario string
	target   string
	measured string
	met      bool
	skipped  string // non-empty: not measured in this run, and why
}

type report struct {
	started  time.Time
	finished time.Time
	machine  machine
	cfg      config
	sections []*section
	goals    []goal
	// loadBefore and loadAfter are /proc/loadavg at the start and end.
	loadBefore, loadAfter string
}

func (rep *report) section(title, intro string) *section {
	s := &section{title: title, intro: intro}
	rep.sections = append(rep.sections, s)
	return s
}

func (rep *report) goal(scenario, target, measured string, met bool) {
	rep.goals = append(rep.goals, goal{scenario: scenario, target: target, measured: measured, met: met})
}

func (rep *report) skip(scenario, target, why string) {
	rep.goals = append(rep.goals, goal{scenario: scenario, target: target, skipped: why})
}

// markdown writes the whole report.
func (rep *report) markdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Benchmarks\n\n")
	p("Written by `cd bench && go run . %s` — every figure below comes from that one run;\n", rep.cfg.args())
	p("nothing is typed in. Re-run it to refresh this file. Each figure is the median of\n")
	p("%d repeats, with the spread (min–max) of the repeats; a ratio compares a figure\n", rep.cfg.repeat)
	p("with its anchor measured in the same repeat (per-repeat ratios, median and spread).\n\n")

	p("## Machine and load\n\n")
	m := rep.machine
	p("| | |\n|---|---|\n")
	p("| CPU | %s |\n| cores (GOMAXPROCS) | %d (%d) |\n| memory | %s |\n", m.CPU, m.Cores, m.GOMAXPROCS, m.Memory)
	p("| kernel | %s |\n| Go | %s |\n| disk / filesystem (temp dir) | %s |\n", m.Kernel, m.Go, m.Disk)
	p("| run | %s → %s (%s) |\n", rep.started.UTC().Format(time.RFC3339), rep.finished.UTC().Format(time.RFC3339), rep.finished.Sub(rep.started).Round(time.Second))
	p("| load average (1/5/15 min) at start / end | %s / %s |\n\n", rep.loadBefore, rep.loadAfter)
	if rep.cfg.loadNote != "" {
		p("%s\n\n", rep.cfg.loadNote)
	}

	p("## Goals\n\n")
	p("| scenario | goal | measured | verdict |\n|---|---|---|---|\n")
	for _, g := range rep.goals {
		switch {
		case g.skipped != "":
			p("| %s | %s | not measured: %s | — |\n", g.scenario, g.target, g.skipped)
		case g.met:
			p("| %s | %s | %s | **met** |\n", g.scenario, g.target, g.measured)
		default:
			p("| %s | %s | %s | **missed** |\n", g.scenario, g.target, g.measured)
		}
	}
	p("\n")

	for _, s := range rep.sections {
		p("## %s\n\n", s.title)
		if s.intro != "" {
			p("%s\n\n", strings.TrimSpace(s.intro))
		}
		if len(s.rows) > 0 {
			p("| figure | median | min–max | ratio to anchor (min–max) | anchor |\n|---|---:|---:|---:|---|\n")
			for _, r := range s.rows {
				ratio, anchor := "", ""
				if r.anchor != nil {
					med, lo, hi := r.ratio()
					ratio = fmt.Sprintf("%s× (%s–%s)", num(med), num(lo), num(hi))
					anchor = r.anchor.name
				}
				name := r.name
				if r.note != "" {
					name += " — " + r.note
				}
				p("| %s | %s %s | %s–%s | %s | %s |\n", name, num(r.vals.median()), r.unit, num(r.vals.min()), num(r.vals.max()), ratio, anchor)
			}
			p("\n")
		}
		for _, n := range s.notes {
			p("- %s\n", n)
		}
		if len(s.notes) > 0 {
			p("\n")
		}
	}
}
