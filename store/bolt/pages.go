package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
)

// verifyPages walks the page tree of the bbolt file at path, as of its
// newest valid meta page, in a copy of the file held in memory, checking
// that every page and every element lies inside the file. bbolt's own
// consistency check reads pages through its memory map from a goroutine of
// its own: a damaged element can send it past the end of the map, which
// is a fault that kills the process rather than a panic Open could
// recover (DESIGN.md#board-damage). Here the same mistake is an index out of
// range in this goroutine, reported as damage. It reads the layout of
// bbolt's file format version 2, which bbolt has kept since 2014. ps is the
// page size bbolt opened the file with: it reads it from whichever meta
// page is valid, so a wiped meta page 0 does not make the file unreadable.
func verifyPages(path string, ps int) (err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("a page or element lies outside the file (%v)", r)
		}
	}()
	const (
		pageHeader = 16
		elemSize   = 16
		metaMagic  = 0xED0CDAED
		branchPage = 0x01
		leafPage   = 0x02
		bucketLeaf = 0x01
		maxDepth   = 64
	)
	le := binary.LittleEndian
	if ps < 512 || ps > 1<<20 {
		return fmt.Errorf("page size %d", ps)
	}
	type meta struct {
		root, highWater, txid uint64
		ok                    bool
	}
	readMeta := func(i int) meta {
		m := b[i*ps+pageHeader : i*ps+pageHeader+64]
		h := fnv.New64a()
		_, _ = h.Write(m[:56])
		if le.Uint32(m[0:]) != metaMagic || h.Sum64() != le.Uint64(m[56:]) {
			return meta{}
		}
		return meta{root: le.Uint64(m[16:]), highWater: le.Uint64(m[40:]), txid: le.Uint64(m[48:]), ok: true}
	}
	m := readMeta(0)
	if m1 := readMeta(1); m1.ok && (!m.ok || m1.txid > m.txid) {
		m = m1
	}
	if !m.ok {
		return errors.New("no valid meta page")
	}
	seen := map[uint64]bool{}
	var walkPage func(pg []byte, depth int) error
	walk := func(id uint64, depth int) error {
		if id < 2 || id >= m.highWater {
			return fmt.Errorf("page %d is outside the file's %d pages", id, m.highWater)
		}
		if seen[id] {
			return fmt.Errorf("page %d is reached twice", id)
		}
		seen[id] = true
		off := int(id) * ps
		size := (int(le.Uint32(b[off+12:])) + 1) * ps
		return walkPage(b[off:off+size], depth)
	}
	walkPage = func(pg []byte, depth int) error {
		if depth > maxDepth {
			return errors.New("the tree is deeper than any bbolt writes")
		}
		flags, count := le.Uint16(pg[8:]), int(le.Uint16(pg[10:]))
		for i := range count {
			e := pg[pageHeader+i*elemSize : pageHeader+(i+1)*elemSize]
			at := pageHeader + i*elemSize
			switch flags {
			case leafPage:
				pos, ks, vs := int(le.Uint32(e[4:])), int(le.Uint32(e[8:])), int(le.Uint32(e[12:]))
				v := pg[at+pos+ks : at+pos+ks+vs]
				if le.Uint32(e[0:])&bucketLeaf == 0 {
					continue
				}
				if root := le.Uint64(v[0:]); root != 0 {
					if err := walk(root, depth+1); err != nil {
						return err
					}
				} else if err := walkPage(v[16:], depth+1); err != nil {
					return err
				}
			case branchPage:
				pos, ks := int(le.Uint32(e[0:])), int(le.Uint32(e[4:]))
				_ = pg[at+pos : at+pos+ks]
				if err := walk(le.Uint64(e[8:]), depth+1); err != nil {
					return err
				}
			default:
				return fmt.Errorf("a page of type %#x where the tree has a branch or a leaf", flags)
			}
		}
		return nil
	}
	return walk(m.root, 0)
}
