package board

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLabelBytes caps a label's length.
const MaxLabelBytes = 128

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
