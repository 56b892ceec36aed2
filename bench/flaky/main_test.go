package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReport: pass counts per test over runs, the slowest run, failures
// first with their reasons, a test cut off by a timeout counted failed,
// subtests and skips not counted.
func TestReport(t *testing.T) {
	run1 := `{"Action":"run","Test":"TestA"}
{"Action":"output","Test":"TestA","Output":"    a_test.go:10: fine\n"}
{"Action":"pass","Test":"TestA","Elapsed":1.5}
{"Action":"run","Test":"TestB"}
{"Action":"run","Test":"TestB/sub"}
{"Action":"fail","Test":"TestB/sub","Elapsed":0.1}
{"Action":"output","Test":"TestB","Output":"    b_test.go:42: ping a stopped node: exit 1\n"}
{"Action":"output","Test":"TestB","Output":"--- FAIL: TestB (2.00s)\n"}
{"Action":"fail","Test":"TestB","Elapsed":2}
{"Action":"run","Test":"TestS"}
{"Action":"skip","Test":"TestS","Elapsed":0}
`
	run2 := `{"Action":"run","Test":"TestA"}
{"Action":"pass","Test":"TestA","Elapsed":3.25}
{"Action":"run","Test":"TestB"}
{"Action":"pass","Test":"TestB","Elapsed":1}
{"Action":"run","Test":"TestC"}
{"Action":"output","Test":"TestC","Output":"    c_test.go:7: waiting\n"}
`
	tests := map[string]*result{}
	for i, r := range []string{run1, run2} {
		if err := read(strings.NewReader(r), i+1, tests); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if !report(&b, tests, 2) {
		t.Error("report says nothing failed")
	}
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"TestB                                      1/2           2s [1]\n",
		"TestC                                      0/1           0s [2]\n",
		"TestA                                      2/2         3.3s \n",
		"TestB failed in run 1:\n    b_test.go:42: ping a stopped node: exit 1\n--- FAIL: TestB (2.00s)",
		"TestC failed in run 2:\nnever finished (timeout or killed)\n    c_test.go:7: waiting",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(out, "TestS") || strings.Contains(out, "TestB/sub") {
		t.Error("report counts a skipped test or a subtest")
	}
	if strings.Index(out, "TestA ") < strings.Index(out, "TestC ") {
		t.Error("failures are not listed first")
	}
}
