package desired

// walk compares recs, the inputs' records, with the last inputs' (t.prev)
// and touches each record that is new, changed or no longer there (then
// out of t.recs, index -1). Both lists come in the source's order, so
// most records sit where they sat: walk compares them in place, in order
// (no map lookup, memory read in sequence), and looks a record up by id
// only where the two lists part: an added record (not known), a removed
// one (the next of the last list is this one), or records in a new
// order (then every record up to the end is looked up), or every record
// after UpdateChanged (which keeps no list). false when recs
// holds an id twice. O(records) comparisons, O(changes) lookups.
func (t *Tracker) walk(recs []Record, touch func(*tracked)) bool {
	prev := t.prev
	var skipped []string // ids of the last list walk passed over: removed, or somewhere else in recs
	j := 0
	for i := range recs {
		r := &recs[i]
		if j < len(prev) && r.ID != prev[j].ID && j+1 < len(prev) && r.ID == prev[j+1].ID && t.recs[prev[j].ID] != nil {
			skipped = append(skipped, prev[j].ID) // prev[j] left the list, or moved
			j++
		}
		if j < len(prev) && r.ID == prev[j].ID {
			j++
			if len(r.Routes) == 0 && sameRecord(r, &prev[j-1]) {
				continue // the common case: unchanged, in place
			}
			e := t.recs[r.ID]
			e.index = i
			if !sameRecord(&e.rec, r) {
				touch(e)
				e.rec = *r
			}
			t.carry(e)
			continue
		}
		e := t.recs[r.ID]
		switch {
		case e == nil:
			e = &tracked{rec: *r}
			t.recs[r.ID] = e
			touch(e)
		case e.seen == t.gen:
			return false
		case !sameRecord(&e.rec, r):
			touch(e)
			e.rec = *r
		}
		e.seen, e.index = t.gen, i
		t.carry(e)
	}
	for ; j < len(prev); j++ {
		skipped = append(skipped, prev[j].ID)
	}
	if prev == nil { // after UpdateChanged: every record was looked up, and those not seen left
		for id, e := range t.recs {
			if e.seen != t.gen {
				skipped = append(skipped, id)
			}
		}
	}
	for _, id := range skipped {
		if e := t.recs[id]; e != nil && e.seen != t.gen {
			touch(e)
			delete(t.recs, id)
			e.index = -1
			t.carry(e)
		}
	}
	t.prev = recs
	return len(t.recs) == len(recs)
}
