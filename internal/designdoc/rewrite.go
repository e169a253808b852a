package designdoc

import (
	"path/filepath"
	"regexp"
	"strings"
)

// The citation rewrite: older comments and docs cited the design by the
// section numbers of an external record ("§5", "Consequences") and by two
// documents that are not in the repository. Rewrite turns every such
// citation into a pointer at the DESIGN.md anchor of the rule. It is a
// mapping from the citation forms to anchors, refined by the words around
// the citation (a "§9" next to "label" is the label sweeps, next to
// "recovery" the recovery sweep), so it can be run again after any merge:
// a file with no old citation comes out unchanged.
//
// The old record's name is spelled in pieces here so that this file does
// not itself read as a citation to a reader grepping for one.

var (
	oldRecord = "ADR" + "-0" + "96"
	// wrap is the space between two words of one citation: blanks, or a
	// line break continuing a // comment.
	wrap = `(?:[ \t]*\n[ \t]*(?://[ \t]*)?|[ \t]+)`
	// sectionCite matches "§5", "§8, §9" and "<record> §6, §7", with or
	// without the record's name; consequencesCite matches
	// "<record> Consequences" and the record's bare name.
	sectionCite = regexp.MustCompile(`(?:` + oldRecord + wrap + `)?§(\d+)((?:,` + wrap + `?§\d+)*)`)
	recordCite  = regexp.MustCompile(oldRecord + `(?:` + wrap + `(Consequences))?`)
	sectionNum  = regexp.MustCompile(`§(\d+)`)
	// The parking-brake record, cited for row 6.
	brakeCite = regexp.MustCompile(`ADR` + `-014(?:'s)?`)
	// andConsequences continues a section list: "§9 and Consequences".
	andConsequences = regexp.MustCompile(`^` + wrap + `(?:and` + wrap + `)?Consequences`)
)

// rule picks an anchor for a citation of one of its sections whose
// surrounding words contain any of its words. Rules are tried in order,
// the more specific first; a citation none matches takes its first
// section's default.
type rule struct {
	sections string // the sections the rule applies to: "1".."9", "C" (Consequences), "-" (the bare name)
	words    []string
	anchor   string
}

var rules = []rule{
	{"8 9", []string{"label", "one-shot", "re-arm", "snapshot", "absolute", "relative", "sweep's write", "board-administration", "contended"}, "label-sweeps"},
	{"9", []string{"board lives", "one board", "board definition", "stored definition"}, "board-in-store"},
	{"9", []string{"$set", "erase a field", "pipeline", "whole-document replace here"}, "twin-writes"},
	{"8 9", []string{"recovery"}, "recovery-sweep"},
	{"8 9", []string{"release n", "default off"}, "release-n"},
	{"8 9", []string{"two releases", "upgrad", "rollout"}, "rollout"},
	{"9", []string{"batch cap"}, "paging"},
	{"8 9", []string{"un-leased", "unleased", "stripped", "strips", "whole-document", "mixed-fleet", "starve", "conserved"}, "unleased-sweep"},
	{"8", []string{"startup", "at boot", "boot sweep", "ungated", "expires the lease"}, "boot-sweep"},
	{"8", []string{"sweeps' tool", "nobody can use"}, "sweeps"},
	{"6 7", []string{"differs from the bbolt"}, "twins"},
	{"6", []string{"horizon", "absence", "un-leased", "unleased"}, "unleased-arm"},
	{"6 1", []string{"floor", "monotone", "goes up", "go back", "went back", "survive", "server time", "new fence", "share a token"}, "epoch-monotone"},
	{"6", []string{"refuse", "missing", "lost its epoch", "no epoch", "epoch gone", "dropped"}, "lost-fence"},
	{"7", []string{"epoch", "counter"}, "twin-epoch"},
	{"7", []string{"un-leased", "unleased", "nobody else writes", "only writer", "own file"}, "twin-unleased"},
	{"7", []string{"repark", "resume", "ceiling", "pool", "release"}, "twin-repark"},
	{"7", []string{"clock"}, "twin-clock"},
	{"5", []string{"dependent", "waiting_deps", "reopen is", "a reopen", "bulk reopen"}, "reopen"},
	{"4", []string{"stamp", "window"}, "row-3"},
	{"4", []string{"observed"}, "observed-card"},
	{"4", []string{"continuation"}, "row-8"},
	{"2", []string{"claim_lost", "must stop", "stopping it"}, "claim-lost"},
	{"3 2", []string{"stops on its own", "stop on its own", "stopping on their own", "deadline", "silent", "ping"}, "client-deadline"},
	{"3", []string{"oracle", "promot", "proof", "prove", "unknown"}, "oracle"},
	{"3", []string{"its own agent marker", "recovery marker"}, "recovery-marker"},
	{"C", []string{"legacy", "never reaped by time"}, "legacy-claims"},
	{"C", []string{"pruned", "give-up", "gave_up", "gone", "fresh start"}, "row-2"},
	{"C", []string{"launch-column", "launch column", "verdict", "descriptive", "run's own", "living one", "living owner", "downstream chain"}, "verdict-provenance"},
	{"C", []string{"vocabulary", "audit types"}, "provenance"},
	{"C", []string{"effect", "fire", "hint", "machine", "blank", "launches nothing"}, "machine-reasons"},
	{"1", []string{"cadence", "third of the lease"}, "heartbeat"},
	{"1 -", []string{"lease/3", "batched", "renewed", "tick"}, "heartbeat-batch"},
	{"1", []string{"server clock", "from the server", "the server ("}, "store-clock"},
}

// sectionDefault is the anchor of a section no rule refines.
var sectionDefault = map[string]string{
	"1": "epoch", "2": "fence", "3": "transfer-first", "4": "decision-table",
	"5": "sinks", "6": "lost-fence", "7": "twins", "8": "gate", "9": "rollout",
	"C": "provenance", "-": "reading",
}

// pick chooses the anchor for a citation of sections (in the order cited)
// with context the words around it.
func pick(sections []string, context string) string {
	ctx := strings.ToLower(context)
	for _, r := range rules {
		applies := false
		for _, s := range sections {
			if strings.Contains(" "+r.sections+" ", " "+s+" ") {
				applies = true
			}
		}
		if !applies {
			continue
		}
		for _, w := range r.words {
			if strings.Contains(ctx, w) {
				return r.anchor
			}
		}
	}
	if a, ok := sectionDefault[sections[0]]; ok {
		return a
	}
	return "reading"
}

// contextOf is the text around text[start:end]: the line before, the
// citation's own lines and the line after, comment markers dropped and
// spaces collapsed, so a phrase wrapped across comment lines still reads
// as the phrase.
func contextOf(text string, start, end int) string {
	from := start
	for n := 0; n < 2 && from > 0; n++ {
		i := strings.LastIndexByte(text[:from], '\n')
		if i < 0 {
			from = 0
			break
		}
		from = i
	}
	to := end
	for n := 0; n < 2 && to < len(text); n++ {
		i := strings.IndexByte(text[to:], '\n')
		if i < 0 {
			to = len(text)
			break
		}
		to += i + 1
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(text[from:to], "//", " ")), " ")
}

// pointer is how a file cites an anchor: DESIGN.md#<anchor> in code, a
// relative link in Markdown.
func pointer(path, anchor string) string {
	if !strings.HasSuffix(path, ".md") {
		return "DESIGN.md#" + anchor
	}
	rel, err := filepath.Rel(filepath.Dir(filepath.FromSlash(path)), "docs")
	if err != nil {
		rel = "docs"
	}
	target := filepath.ToSlash(filepath.Join(rel, "DESIGN.md"))
	return "[DESIGN.md#" + anchor + "](" + target + "#" + anchor + ")"
}

// Edit is one rewritten citation: the line it started on, the citation as
// it was and the pointer that replaced it.
type Edit struct {
	Line     int
	Old, New string
}

// Rewrite returns text (the content of the file at path, relative to the
// repository root) with every old citation replaced by a DESIGN.md
// pointer, and the edits it made. Text without one comes back unchanged.
func Rewrite(path, text string) (string, []Edit) {
	// Every citation it rewrites holds one of these; most files hold none,
	// and the expressions are slow on a whole repository.
	if !strings.Contains(text, "§") && !strings.Contains(text, "ADR") {
		return text, nil
	}
	type edit struct {
		start, end int
		with       string
	}
	var edits []edit
	taken := func(s, e int) bool {
		for _, x := range edits {
			if s < x.end && e > x.start {
				return true
			}
		}
		return false
	}
	for _, m := range sectionCite.FindAllStringSubmatchIndex(text, -1) {
		var secs []string
		for _, n := range sectionNum.FindAllStringSubmatch(text[m[0]:m[1]], -1) {
			secs = append(secs, n[1])
		}
		// "§9 and Consequences" and "§4 ... Consequences": a section list
		// followed by the word is one citation.
		end := m[1]
		if loc := andConsequences.FindStringIndex(text[end:]); loc != nil {
			end += loc[1]
			secs = append(secs, "C")
		}
		edits = append(edits, edit{m[0], end, pointer(path, pick(secs, contextOf(text, m[0], end)))})
	}
	for _, m := range recordCite.FindAllStringSubmatchIndex(text, -1) {
		if taken(m[0], m[1]) {
			continue
		}
		sec := "-"
		if m[2] >= 0 {
			sec = "C"
		}
		edits = append(edits, edit{m[0], m[1], pointer(path, pick([]string{sec}, contextOf(text, m[0], m[1])))})
	}
	for _, m := range brakeCite.FindAllStringIndex(text, -1) {
		edits = append(edits, edit{m[0], m[1], pointer(path, "row-6")})
	}
	if len(edits) == 0 {
		return text, nil
	}
	// Apply from the end so earlier offsets stay valid.
	for i := 1; i < len(edits); i++ {
		for j := i; j > 0 && edits[j].start > edits[j-1].start; j-- {
			edits[j], edits[j-1] = edits[j-1], edits[j]
		}
	}
	out := text
	report := make([]Edit, len(edits))
	for i, e := range edits {
		out = out[:e.start] + e.with + out[e.end:]
		report[len(edits)-1-i] = Edit{
			Line: strings.Count(text[:e.start], "\n") + 1,
			Old:  text[e.start:e.end],
			New:  e.with,
		}
	}
	return out, report
}
