package member

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The simulated control node in a child process (issue 54 item 2): the
// test binary run again as TestSimControlProcess, so that this process's
// CPU (getrusage) is the worker's alone and the child's the control
// node's, each counted by its kernel, with nothing sampled or guessed.
// The child takes its spec (simControlSpec: the identity the CA here
// signed) and then one command a line on its stdin, and answers each on
// its fd 3; it ends when its stdin closes (this process ended or is done
// with it).

// simProcEnv marks the child run (its value is unused).
const simProcEnv = "MESHD_SIM_CONTROL_PROC"

// simTable is the simulated control node as the worker's side of the
// simulation uses it: in this process (*simControl) or in a child
// (*simControlProc).
type simTable interface {
	put(id string, rec json.RawMessage, revoke string) uint64
	load(recs map[string]json.RawMessage)
	endpoints() simEndpoints
}

// simEndpoints are where a worker finds the control node.
type simEndpoints struct {
	Addr     string `json:"addr"`      // its internal API (the watch), 127.0.0.1:port
	LHPort   int    `json:"lh_port"`   // its Nebula's UDP port
	STUNPort int    `json:"stun_port"` // its STUN responder's UDP port
}

// simCommand is one line to the child.
type simCommand struct {
	Op     string                     `json:"op"` // put, load, cpu
	ID     string                     `json:"id,omitempty"`
	Rec    json.RawMessage            `json:"rec,omitempty"`
	Revoke string                     `json:"revoke,omitempty"`
	Recs   map[string]json.RawMessage `json:"recs,omitempty"`
}

// simReply is the child's answer to one command.
type simReply struct {
	Index uint64        `json:"index,omitempty"` // put: the change's index
	CPU   time.Duration `json:"cpu,omitempty"`   // cpu: the child's CPU so far (user and system)
}

// simControlProc is the control node running in a child process.
type simControlProc struct {
	ep  simEndpoints
	out string // the child's stdout and stderr, a file

	mu   sync.Mutex
	tb   testing.TB
	in   *json.Encoder
	from *json.Decoder
}

// startSimControlProc starts the control node in a child process and
// returns once it serves.
func startSimControlProc(tb testing.TB, spec simControlSpec) *simControlProc {
	tb.Helper()
	bin, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	p := &simControlProc{tb: tb, out: filepath.Join(tb.TempDir(), "control.out")}
	outFile, err := os.Create(p.out)
	if err != nil {
		tb.Fatal(err)
	}
	defer outFile.Close()
	replyR, replyW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestSimControlProcess$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), simProcEnv+"=1")
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = outFile, outFile, []*os.File{replyW}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start the simulated control node's process: %v", err)
	}
	_ = replyW.Close() // the child holds its end
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = replyR.Close(); close(done) }()
	tb.Cleanup(func() {
		_ = stdin.Close() // the child stops when its stdin ends
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	p.in, p.from = json.NewEncoder(stdin), json.NewDecoder(bufio.NewReader(replyR))
	if err := p.in.Encode(spec); err != nil {
		tb.Fatalf("the simulated control node's spec: %v", err)
	}
	if err := p.from.Decode(&p.ep); err != nil {
		tb.Fatalf("the simulated control node's process did not start: %v%s", err, p.childOutput())
	}
	return p
}

func (p *simControlProc) childOutput() string {
	b, _ := os.ReadFile(p.out)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return fmt.Sprintf("\n--- its output:\n%s", b)
}

// do sends c and reads the answer.
func (p *simControlProc) do(c simCommand) simReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	var r simReply
	if err := p.in.Encode(c); err != nil {
		p.tb.Fatalf("the simulated control node's process, %s: %v%s", c.Op, err, p.childOutput())
	}
	if err := p.from.Decode(&r); err != nil {
		p.tb.Fatalf("the simulated control node's process, %s: %v%s", c.Op, err, p.childOutput())
	}
	return r
}

func (p *simControlProc) put(id string, rec json.RawMessage, revoke string) uint64 {
	return p.do(simCommand{Op: "put", ID: id, Rec: rec, Revoke: revoke}).Index
}

func (p *simControlProc) load(recs map[string]json.RawMessage) {
	p.do(simCommand{Op: "load", Recs: recs})
}

func (p *simControlProc) endpoints() simEndpoints { return p.ep }

// cpu is the child's CPU so far, as its own getrusage counts it.
func (p *simControlProc) cpu() time.Duration { return p.do(simCommand{Op: "cpu"}).CPU }

// TestSimControlProcess is the child's side: it runs only as
// startSimControlProc's child.
func TestSimControlProcess(t *testing.T) {
	if os.Getenv(simProcEnv) == "" {
		t.Skip("the simulated control node's child process (scalesim_proc_test.go); run by BenchmarkWorkerSim")
	}
	reply := json.NewEncoder(os.NewFile(3, "reply"))
	in := json.NewDecoder(bufio.NewReader(os.Stdin))
	var spec simControlSpec
	if err := in.Decode(&spec); err != nil {
		t.Fatalf("the spec: %v", err)
	}
	sc := startSimControlAs(t, spec, simLog())
	if err := reply.Encode(sc.endpoints()); err != nil {
		t.Fatal(err)
	}
	for {
		var c simCommand
		if err := in.Decode(&c); err != nil {
			return // stdin ended: the parent is done
		}
		var r simReply
		switch c.Op {
		case "put":
			r.Index = sc.put(c.ID, c.Rec, c.Revoke)
		case "load":
			sc.load(c.Recs)
		case "cpu":
			r.CPU = simProcessCPU(t)
		default:
			t.Fatalf("unknown command %q", c.Op)
		}
		if err := reply.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
}
