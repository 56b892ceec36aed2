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
// records of gone taken out and those of in put in their places: the
// changed records sorted, then one pass over the list merging them in,
// O(records + changed log changed). Sorting every record again after
// each watch line was 29% of a worker's CPU per change at 10,000 members
// (issue 54, member.BenchmarkWorkerSim); a binary search and a
// slices.Insert or Delete per changed record moved half the list (2 MB
// at 10,000) each, a third of a worker's CPU per change when pair
// health's round built the list after 40 changes.
func resorted(list, gone, in []control.NodeRecord) []control.NodeRecord {
	gone, in = slices.Clone(gone), slices.Clone(in) // the caller's, sorted here
	slices.SortFunc(gone, recordOrder)
	slices.SortFunc(in, recordOrder)
	out := make([]control.NodeRecord, 0, len(list)+len(in))
	g, j := 0, 0
	for _, r := range list {
		for j < len(in) && recordOrder(in[j], r) < 0 {
			out = append(out, in[j])
			j++
		}
		if j < len(in) && recordOrder(in[j], r) == 0 {
			out = append(out, in[j]) // put in r's place
			j++
			continue
		}
		for g < len(gone) && recordOrder(gone[g], r) < 0 {
			g++
		}
		if g < len(gone) && recordOrder(gone[g], r) == 0 {
			continue // taken out
		}
		out = append(out, r)
	}
	return append(out, in[j:]...)
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
