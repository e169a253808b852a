package main

import (
	"encoding/binary"
	"testing"
)

// bsonDoc builds a BSON document from already encoded elements.
func bsonDoc(elems ...[]byte) []byte {
	var body []byte
	for _, e := range elems {
		body = append(body, e...)
	}
	out := binary.LittleEndian.AppendUint32(nil, uint32(4+len(body)+1))
	return append(append(out, body...), 0)
}

func bsonString(key, v string) []byte {
	b := append([]byte{0x02}, key...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)+1))
	return append(append(b, v...), 0)
}

func bsonInt32(key string, v int32) []byte {
	b := append([]byte{0x10}, key...)
	b = append(b, 0)
	return binary.LittleEndian.AppendUint32(b, uint32(v))
}

func bsonSub(key string, doc []byte) []byte {
	b := append([]byte{0x03}, key...)
	b = append(b, 0)
	return append(b, doc...)
}

// opMsgOf wraps sections (each already encoded, kind byte included) in an
// OP_MSG.
func opMsgOf(sections ...[]byte) []byte {
	var body []byte
	body = binary.LittleEndian.AppendUint32(body, 0) // flags
	for _, s := range sections {
		body = append(body, s...)
	}
	hdr := make([]byte, headerLen)
	binary.LittleEndian.PutUint32(hdr[0:], uint32(headerLen+len(body)))
	binary.LittleEndian.PutUint32(hdr[12:], opMsg)
	return append(hdr, body...)
}

func TestDatabaseOf(t *testing.T) {
	body := bsonDoc(
		bsonString("update", "cards"),
		bsonSub("filter", bsonDoc(bsonString("$db", "not-this-one"), bsonInt32("epoch", 3))),
		bsonInt32("ordered", 1),
		bsonString("$db", "lk12_3_fleet"),
	)
	docs := bsonDoc(bsonString("q", "x"))
	seqID := append([]byte("updates"), 0)
	seq := binary.LittleEndian.AppendUint32([]byte{1}, uint32(4+len(seqID)+len(docs)))
	seq = append(append(seq, seqID...), docs...)

	for _, tc := range []struct {
		name string
		msg  []byte
		db   string
		ok   bool
	}{
		{"body alone", opMsgOf(append([]byte{0}, body...)), "lk12_3_fleet", true},
		{"a document sequence first", opMsgOf(seq, append([]byte{0}, body...)), "lk12_3_fleet", true},
		{"no $db", opMsgOf(append([]byte{0}, bsonDoc(bsonString("ping", "x"))...)), "", false},
		{"truncated", opMsgOf(append([]byte{0}, body[:len(body)-8]...)), "", false},
		{"not an OP_MSG", func() []byte {
			m := opMsgOf(append([]byte{0}, body...))
			binary.LittleEndian.PutUint32(m[12:], opQuery)
			return m
		}(), "", false},
	} {
		db, ok := databaseOf(tc.msg)
		if db != tc.db || ok != tc.ok {
			t.Errorf("%s: databaseOf = %q, %v; want %q, %v", tc.name, db, ok, tc.db, tc.ok)
		}
	}
}
