package board

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLabelBytes caps a label's length.
const MaxLabelBytes = 128

// MaxRouteLabels caps the labels one ClaimNext or Start next asks for.
const MaxRouteLabels = 8

// ValidateRouteLabels checks the labels a ClaimNext or a Start next routes
// by (DESIGN.md#label-routing): at most MaxRouteLabels, each a valid label
// as a card stores it (trimmed, not empty), none twice.
func ValidateRouteLabels(labels []string) error {
	if len(labels) > MaxRouteLabels {
		return Invalid("%d labels to route by (at most %d)", len(labels), MaxRouteLabels)
	}
	for i, l := range labels {
		if l == "" || strings.TrimSpace(l) != l {
			return Invalid("route label %q: empty, or blank at an end", l)
		}
		if err := checkText("label", l, MaxLabelBytes); err != nil {
			return err
		}
		if slices.Contains(labels[:i], l) {
			return Invalid("route label %q given twice", l)
		}
	}
	return nil
}

// CarriesLabels reports whether c carries every one of labels.
func (c Card) CarriesLabels(labels []string) bool {
	for _, l := range labels {
		if !slices.Contains(c.Labels, l) {
			return false
		}
	}
	return true
}

// MaxIDBytes caps a card id's length.
const MaxIDBytes = 200

// ValidateName checks a card id, run id or state name: non-empty, valid
// UTF-8, no surrounding whitespace, no control characters, at most
// MaxIDBytes. Every name a store is asked about passes it first, reads
// included: a name that is not UTF-8 cannot even be sent to a store plugin
// (protobuf strings are UTF-8).
func ValidateName(kind, s string) error {
	if s == "" {
		return Invalid("empty %s", kind)
	}
	if strings.TrimSpace(s) != s {
		return Invalid("%s %q has surrounding whitespace", kind, s)
	}
	return checkText(kind, s, MaxIDBytes)
}

func checkText(kind, s string, max int) error {
	if len(s) > max {
		return Invalid("%s is %d bytes, over the %d-byte limit", kind, len(s), max)
	}
	if !utf8.ValidString(s) {
		return Invalid("%s %q is not valid UTF-8", kind, s)
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return Invalid("%s %q contains a control character", kind, s)
	}
	return nil
}

// NormalizeLabels trims each label, drops empties, de-duplicates keeping first
// occurrence order, and validates (no control characters, ≤ MaxLabelBytes).
func NormalizeLabels(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, l := range in {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if err := checkText("label", l, MaxLabelBytes); err != nil {
			return nil, err
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

// ApplyLabelChange computes the relative label edit of AdjustLabels: add then
// remove, removes win, order kept. changed is false when the result equals
// the input (a no-op writes nothing and emits no event).
func ApplyLabelChange(current, add, remove []string) (next []string, changed bool, err error) {
	add, err = NormalizeLabels(add)
	if err != nil {
		return nil, false, err
	}
	remove, err = NormalizeLabels(remove)
	if err != nil {
		return nil, false, err
	}
	next = slices.Clone(current)
	for _, l := range add {
		if !slices.Contains(next, l) {
			next = append(next, l)
		}
	}
	next = slices.DeleteFunc(next, func(l string) bool { return slices.Contains(remove, l) })
	if next == nil {
		next = []string{}
	}
	return next, !slices.Equal(current, next), nil
}
