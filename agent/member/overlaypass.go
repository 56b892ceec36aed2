package member

import (
	"time"

	"github.com/meshd/meshd/mesh"
)

// One pass of the overlay loop at the cost of the change (issue 54 item
// 2). A worker's node list keeps a log of the records each change touched
// (fetched.RecordsSince); the loop keeps the version its tracker's
// records are (overlay.recVer), and a pass reads only the records changed
// since, converts them, and hands them to desired.Tracker.UpdateChanged:
// no copy of the list, no conversion of every record, no comparison of
// every record with the last pass's. The gossip members that
// reportIgnored matches are matched against the tracker's records, one
// lookup each. Every record is read (and converted) only on the
// whole-config path: the first pass, a pass the tracker cannot follow
// (overlaydelta.go), a consumer behind the change log, and on a control
// node, whose raft hands the whole list every time.

// overlayPass reads the pass's inputs and reconciles the overlay
// (reconcileOverlay); it returns how long to wait when the reload gap
// holds the pass back.
func (rt *Runtime) overlayPass() time.Duration {
	ov := rt.ov
	if wait := ov.gapLeft(); wait > 0 {
		return wait
	}
	d := rt.cluster.RecordsSince(ov.recVer)
	in := rt.baseInputs()
	in.RecordsKnown = d.Known
	if ov.tracking && ov.recFollow && !d.Whole && d.Known {
		put, del := rt.changedRecords(d)
		ov.converted.Add(uint64(len(put)))
		if ov.applyTracked(in, func() (mesh.Change, bool) { return ov.tracker.UpdateChanged(in, put, del) }) {
			ov.recVer = d.Version
			in.Members = rt.poolMembers()
			find := ov.tracker.Record
			if !ov.tracking {
				find = nil
				in.Records, _ = rt.records()
			}
			rt.reportIgnored(in, find)
			return 0
		}
		d = rt.cluster.RecordsSince(0) // the whole-config path, with every record
	}
	if !d.Whole {
		d = rt.cluster.RecordsSince(0)
	}
	in.Records, in.RecordsKnown = rt.recordsOf(d), d.Known
	ov.converted.Add(uint64(len(in.Records)))
	in.Members = rt.poolMembers()
	wait := ov.reconcileOverlay(in)
	ov.recVer, ov.recFollow = d.Version, ov.tracking && wait == 0
	rt.reportIgnored(in, nil)
	return wait
}
