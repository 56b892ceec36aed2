package fetched

// The watched copy decoded: the node records in the list's order, kept
// across deltas, and the revocations, decoded when they change.

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/watch"
)

// recordOrder is the node list's order: by name, then by id.
func recordOrder(a, b control.NodeRecord) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
}

// sortedRecords is every record of recs in recordOrder: a whole table's.
func sortedRecords(recs map[string]control.NodeRecord) []control.NodeRecord {
	list := make([]control.NodeRecord, 0, len(recs))
	for _, r := range recs {
		list = append(list, r)
	}
	slices.SortFunc(list, recordOrder)
	return list
}

// resorted is list (in recordOrder; shared, so left as it is) with the
// records of gone taken out and those of in put in their places: one copy
// of the list and a binary search per changed record. Sorting every
// record again after each watch line was 29% of a worker's CPU per change
// at 10,000 members (issue 54, member.BenchmarkWorkerSim).
func resorted(list, gone, in []control.NodeRecord) []control.NodeRecord {
	out := make([]control.NodeRecord, len(list), len(list)+len(in)) // one copy, room for what is added
	copy(out, list)
	for _, r := range gone {
		if i, ok := slices.BinarySearchFunc(out, r, recordOrder); ok {
			out = slices.Delete(out, i, i+1)
		}
	}
	for _, r := range in {
		if i, ok := slices.BinarySearchFunc(out, r, recordOrder); ok {
			out[i] = r
		} else {
			out = slices.Insert(out, i, r)
		}
	}
	return out
}

// decodeDelta decodes a delta's node records: those it puts and the ids
// it deletes. A record that does not decode is left out, and the last
// such error returned.
func decodeDelta(ch watch.Change) (put []control.NodeRecord, del []string, err error) {
	for id, raw := range ch.Put[control.SectionNodes] {
		r, e := control.WatchedRecord(id, raw)
		if e != nil {
			err = e
			continue
		}
		put = append(put, r)
	}
	return put, ch.Del[control.SectionNodes], err
}

// decodeRevoked decodes the revoked section into f.revoked (f.mu held),
// only when it changed: a change of the nodes alone used to decode every
// revocation again.
func (f *followState) decodeRevoked() (err error) {
	f.revoked, f.revVersion = []string{}, 0
	for _, raw := range watch.SortSeq(f.copy.Items(control.SectionRevoked)) {
		f.revVersion++
		fp, e := control.WatchedRevocation(raw)
		if e != nil {
			err = e
			continue
		}
		if fp != "" {
			f.revoked = append(f.revoked, fp)
		}
	}
	return err
}

// decodeInto decodes the node records of put into recs; one that does
// not decode is left out, and the last such error returned.
func decodeInto(recs map[string]control.NodeRecord, put map[string]json.RawMessage) (err error) {
	for id, raw := range put {
		r, e := control.WatchedRecord(id, raw)
		if e != nil {
			err = e
			continue
		}
		recs[id] = r
	}
	return err
}
