package watch

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
)

// Change is what changed in a Table after some index, as of Index: the
// items put (new, or with other bytes) and the keys deleted, by section.
// Full says Put holds every item and the receiver drops what it held
// before. A Change with nothing put or deleted only says the sender's
// table is at Index (a heartbeat, or a wait that ended without news).
type Change struct {
	Index uint64                                `json:"index"`
	Full  bool                                  `json:"full,omitempty"`
	Put   map[string]map[string]json.RawMessage `json:"put,omitempty"`
	Del   map[string][]string                   `json:"del,omitempty"`
}

// Empty reports whether the change carries no item and no deletion.
func (c Change) Empty() bool { return !c.Full && len(c.Put) == 0 && len(c.Del) == 0 }

// Copy is a receiver's copy of a Table: the items as of Index. The zero
// Copy holds nothing at index 0 (it asks for everything).
type Copy struct {
	index    uint64
	sections map[string]map[string]json.RawMessage
}

// Index is the index of the last change applied.
func (c *Copy) Index() uint64 { return c.index }

// Apply applies ch, which must be a change since c's index (or a full
// one). It returns the sections whose items changed; a change from an
// index behind c's (a control node that lags the one before it), whole
// table or not, changes nothing and returns none.
func (c *Copy) Apply(ch Change) []string {
	if ch.Index < c.index {
		return nil
	}
	if c.sections == nil {
		c.sections = map[string]map[string]json.RawMessage{}
	}
	changed := map[string]bool{}
	if ch.Full {
		for s, items := range c.sections {
			if !maps.EqualFunc(items, ch.Put[s], rawEqual) {
				changed[s] = true
			}
		}
		for s, items := range ch.Put {
			if !maps.EqualFunc(items, c.sections[s], rawEqual) {
				changed[s] = true
			}
		}
		c.sections = map[string]map[string]json.RawMessage{}
	}
	for s, items := range ch.Put {
		sec := c.section(s)
		for k, v := range items {
			if !ch.Full && !rawEqual(sec[k], v) {
				changed[s] = true
			}
			sec[k] = v
		}
	}
	for s, keys := range ch.Del {
		sec := c.section(s)
		for _, k := range keys {
			if _, ok := sec[k]; ok {
				delete(sec, k)
				changed[s] = true
			}
		}
	}
	c.index = ch.Index
	return slices.Sorted(maps.Keys(changed))
}

func (c *Copy) section(s string) map[string]json.RawMessage {
	sec := c.sections[s]
	if sec == nil {
		sec = map[string]json.RawMessage{}
		c.sections[s] = sec
	}
	return sec
}

// Items are a section's items by key; the map is the caller's, the
// bytes are shared: read them, never write into them.
func (c *Copy) Items(section string) map[string]json.RawMessage {
	return maps.Clone(c.sections[section])
}

// Each calls fn with each item of a section, in no order, until fn
// returns false; the bytes are shared: read them, never write into them.
func (c *Copy) Each(section string, fn func(key string, raw json.RawMessage) bool) {
	for k, v := range c.sections[section] {
		if !fn(k, v) {
			return
		}
	}
}

// Item is one item of a section.
func (c *Copy) Item(section, key string) (json.RawMessage, bool) {
	v, ok := c.sections[section][key]
	return v, ok
}

// Len is how many items a section holds.
func (c *Copy) Len(section string) int { return len(c.sections[section]) }

func rawEqual(a, b json.RawMessage) bool { return string(a) == string(b) }

// Seq is the key of a list's i-th item, for a section that holds a list
// that only grows (such as revocations): the keys sort as the list does
// with SortSeq.
func Seq(i int) string { return strconv.Itoa(i) }

// SortSeq returns a list section's items in the order of their Seq keys;
// a key that is not a Seq sorts last.
func SortSeq(items map[string]json.RawMessage) []json.RawMessage {
	type kv struct {
		i int
		v json.RawMessage
	}
	list := make([]kv, 0, len(items))
	for k, v := range items {
		i, err := strconv.Atoi(k)
		if err != nil {
			i = int(^uint(0) >> 1)
		}
		list = append(list, kv{i, v})
	}
	slices.SortFunc(list, func(a, b kv) int { return cmp.Compare(a.i, b.i) })
	out := make([]json.RawMessage, len(list))
	for i, e := range list {
		out[i] = e.v
	}
	return out
}
