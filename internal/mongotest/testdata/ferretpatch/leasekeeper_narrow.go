package sqlite

import (
	"fmt"
	"strings"

	"github.com/FerretDB/FerretDB/internal/backends/sqlite/metadata"
	"github.com/FerretDB/FerretDB/internal/handler/sjson"
	"github.com/FerretDB/FerretDB/internal/types"
)

// narrowByStrings is the WHERE clause keeping only the rows whose stored
// JSON spells every string the filter's top-level equalities ask for
// (leasekeeper's test server; see its mongotest/pushdown.go).
func narrowByStrings(filter *types.Document) (string, []any) {
	if filter == nil {
		return "", nil
	}
	var conds []string
	var args []any
	contains := fmt.Sprintf("instr(%s, ?) > 0", metadata.DefaultColumn)
	spell := func(s string) (string, bool) {
		b, err := sjson.MarshalSingleValue(s)
		return string(b), err == nil
	}
	for _, k := range filter.Keys() {
		if strings.HasPrefix(k, "$") {
			continue
		}
		v, err := filter.Get(k)
		if err != nil {
			continue
		}
		switch v := v.(type) {
		case string:
			if needle, ok := spell(v); ok {
				conds = append(conds, contains)
				args = append(args, needle)
			}
		case *types.Document:
			if v.Len() != 1 {
				continue
			}
			in, err := v.Get("$in")
			if err != nil {
				continue
			}
			list, ok := in.(*types.Array)
			if !ok || list.Len() == 0 {
				continue
			}
			var alts []string
			var needles []any
			for i := 0; i < list.Len(); i++ {
				el, _ := list.Get(i)
				s, ok := el.(string)
				if !ok {
					alts = nil
					break
				}
				needle, ok := spell(s)
				if !ok {
					alts = nil
					break
				}
				alts = append(alts, contains)
				needles = append(needles, needle)
			}
			if len(alts) > 0 {
				conds = append(conds, "("+strings.Join(alts, " OR ")+")")
				args = append(args, needles...)
			}
		}
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}
