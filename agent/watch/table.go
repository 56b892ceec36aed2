package watch

import (
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"sync"
)

// Table is a control node's side: the items as of Index, each stamped
// with the index of the state that first held it as it is, and the
// tombstones of items deleted since Floor. Safe for concurrent use.
type Table struct {
	mu    sync.Mutex
	built bool
	index uint64 // the state the items are as of
	// floor: a change since an index below it is Full, because a
	// deletion after it may have lost its tombstone (or, for a table
	// built from a state at floor, was never seen).
	floor    uint64
	items    map[string]map[string]*item
	live     int        // items not deleted
	tombs    int        // deleted items still held, as tombstones
	log      []logEntry // every stamp given, in stamp order (superseded ones dropped when compacted)
	maxTombs int
	next     chan struct{} // closed when the table moves on
	encoded  map[uint64][]byte
}

type item struct {
	raw   json.RawMessage
	stamp uint64
	gone  bool // a tombstone
}

type logEntry struct {
	stamp        uint64
	section, key string
}

// DefaultTombstones is how many deletions a Table remembers: a receiver
// further behind than the oldest of them gets a full table.
const DefaultTombstones = 4096

// NewTable holds nothing until the first Update. maxTombs bounds the
// deletions it remembers (zero: DefaultTombstones).
func NewTable(maxTombs int) *Table {
	if maxTombs <= 0 {
		maxTombs = DefaultTombstones
	}
	return &Table{items: map[string]map[string]*item{}, maxTombs: maxTombs, next: make(chan struct{})}
}

// Update makes the table hold state, the whole of every section as of
// index (a section missing from state holds nothing): an item new or
// with other bytes is stamped index, one missing becomes a tombstone
// stamped index. An index behind the table's is ignored. It reports how
// many items it stamped.
func (t *Table) Update(index uint64, state map[string]map[string]json.RawMessage) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.built && index < t.index {
		return 0
	}
	if !t.built {
		t.built, t.floor = true, index
	}
	stamped := 0
	stamp := func(s, k string, it *item) {
		it.stamp = index
		t.log = append(t.log, logEntry{index, s, k})
		stamped++
	}
	for s, items := range state {
		sec := t.items[s]
		if sec == nil {
			sec = map[string]*item{}
			t.items[s] = sec
		}
		for k, v := range items {
			old := sec[k]
			switch {
			case old == nil:
				old = &item{raw: v}
				sec[k] = old
				t.live++
			case old.gone:
				old.raw, old.gone = v, false
				t.live++
				t.tombs--
			case string(old.raw) == string(v):
				continue
			default:
				old.raw = v
			}
			stamp(s, k, old)
		}
	}
	for s, sec := range t.items {
		for k, it := range sec {
			if _, ok := state[s][k]; ok || it.gone {
				continue
			}
			it.raw, it.gone = nil, true
			t.live--
			t.tombs++
			stamp(s, k, it)
		}
	}
	if stamped > 0 || index > t.index {
		t.index = index
		close(t.next)
		t.next = make(chan struct{})
		t.encoded = nil
	}
	t.prune()
	return stamped
}

// prune drops the oldest tombstones past maxTombs (raising the floor to
// the newest dropped), and compacts the log once superseded entries are
// most of it.
func (t *Table) prune() {
	if t.tombs > t.maxTombs {
		drop := t.tombs - t.maxTombs/2
		for _, e := range t.log {
			if drop == 0 {
				break
			}
			it := t.items[e.section][e.key]
			if it == nil || !it.gone || it.stamp != e.stamp {
				continue
			}
			delete(t.items[e.section], e.key)
			t.tombs--
			drop--
			t.floor = max(t.floor, e.stamp)
		}
	}
	if len(t.log) > 2*(t.live+t.tombs)+64 {
		kept := t.log[:0]
		for _, e := range t.log {
			if it := t.items[e.section][e.key]; it != nil && it.stamp == e.stamp {
				kept = append(kept, e)
			}
		}
		t.log = slices.Clip(kept)
	}
}

// Index is the index the table's items are as of; ok is false before
// the first Update.
func (t *Table) Index() (index uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.index, t.built
}

// Floor is the lowest index a change can be given from without a full
// table.
func (t *Table) Floor() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.floor
}

// Since is what changed after index since: the items stamped later and
// the tombstones of deletions after it, or every item (Full) when since
// is 0 or below the floor. next is closed when the table moves on; a
// caller waits on it for the next change. Before the first Update the
// change is empty at index 0.
func (t *Table) Since(since uint64) (ch Change, next <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.since(since), t.next
}

func (t *Table) since(since uint64) Change {
	ch := Change{Index: t.index}
	if !t.built {
		return Change{}
	}
	if since == 0 || since < t.floor {
		ch.Full = true
		ch.Put = map[string]map[string]json.RawMessage{}
		for s, sec := range t.items {
			for k, it := range sec {
				if !it.gone {
					put(&ch, s, k, it.raw)
				}
			}
		}
		return ch
	}
	if since >= t.index {
		return ch
	}
	first := sort.Search(len(t.log), func(i int) bool { return t.log[i].stamp > since })
	for _, e := range t.log[first:] {
		it := t.items[e.section][e.key]
		if it == nil || it.stamp != e.stamp {
			continue // superseded by a later entry, or a tombstone dropped
		}
		if it.gone {
			if ch.Del == nil {
				ch.Del = map[string][]string{}
			}
			ch.Del[e.section] = append(ch.Del[e.section], e.key)
			continue
		}
		put(&ch, e.section, e.key, it.raw)
	}
	return ch
}

func put(ch *Change, s, k string, v json.RawMessage) {
	if ch.Put == nil {
		ch.Put = map[string]map[string]json.RawMessage{}
	}
	if ch.Put[s] == nil {
		ch.Put[s] = map[string]json.RawMessage{}
	}
	ch.Put[s][k] = v
}

// Encoded is Since as one JSON line (ending in a newline), encoded once
// per index and since and shared by every caller asking the same: most
// receivers ask from the same index, so a change is encoded once, not
// once per receiver. The bytes are shared: never write into them.
func (t *Table) Encoded(since uint64) (line []byte, ch Change, next <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch = t.since(since)
	key := since
	if ch.Full {
		key = 0
	}
	if b, ok := t.encoded[key]; ok {
		return b, ch, t.next
	}
	b, err := json.Marshal(ch)
	if err != nil { // raw items were valid JSON when put; cannot fail
		panic(err)
	}
	b = append(b, '\n')
	if t.encoded == nil || len(t.encoded) >= 64 {
		t.encoded = map[uint64][]byte{}
	}
	t.encoded[key] = b
	return b, ch, t.next
}

// Sections are the names of the sections the table holds items in.
func (t *Table) Sections() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.items))
}
