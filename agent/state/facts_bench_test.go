package state

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkSetFacts is what one SetFacts entry costs a control node's
// FSM at 10,000 records: a batch of 2,048 reports (agent/control's
// maxFactsBatch, the largest a window writes) applied, then the first
// read of the node list, which builds it again. A CA rotation at 10,000
// members is about ten such entries per step when the reports arrive at
// once (the batch is cut at 2,048), more and smaller ones when they
// trickle in.
//
//	go test -run '^$' -bench BenchmarkSetFacts -benchmem ./agent/state
func BenchmarkSetFacts(b *testing.B) {
	f, ids, _ := recordsFSM(b, 10000)
	sig := bytes.Repeat([]byte("s"), 72) // an ECDSA P-256 signature's size
	batches := make([][]byte, 2)
	for v := range batches {
		c := SetFacts{Actor: "node:c1"}
		for _, id := range ids[:2048] {
			c.Changes = append(c.Changes, FactChange{NodeID: id, Version: "0.3.0",
				CA: "0123abcd.4567ef01." + string(rune('a'+v)) + "9abcdef", CASig: sig})
		}
		data, err := Encode(c)
		if err != nil {
			b.Fatal(err)
		}
		batches[v] = data
	}
	b.SetBytes(int64(len(batches[0])))
	b.ResetTimer()
	for i := range b.N {
		if err, _ := f.Apply(&raft.Log{Index: uint64(i + 2), Data: batches[i%2]}).(error); err != nil {
			b.Fatal(err)
		}
		if len(f.Nodes()) != 10001 {
			b.Fatal("records lost")
		}
	}
}
