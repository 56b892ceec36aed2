package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/serf/serf"

	"github.com/meshd/meshd/codes"
)

func TestEventQueueDropsOldest(t *testing.T) {
	q := newEventQueue(2)
	for i := range 5 {
		q.push(Event{Kind: EventJoin, Members: []Member{{Name: fmt.Sprint(i)}}})
	}
	if got := q.dropped.Load(); got != 3 {
		t.Fatalf("dropped = %d, want 3", got)
	}
	for _, want := range []string{"3", "4"} {
		if got := (<-q.ch).Members[0].Name; got != want {
			t.Fatalf("got event %s, want %s (the newest survive)", got, want)
		}
	}
}

func TestEventFromSerf(t *testing.T) {
	at := time.Unix(1700000000, 0)
	m := serf.Member{Name: "a", Addr: net.IPv4(127, 78, 0, 1), Port: 7946, Tags: map[string]string{"role": "control"}, Status: serf.StatusAlive}
	for _, tc := range []struct {
		typ  serf.EventType
		want EventKind
	}{
		{serf.EventMemberJoin, EventJoin},
		{serf.EventMemberLeave, EventLeave},
		{serf.EventMemberFailed, EventFailed},
		{serf.EventMemberUpdate, EventUpdate},
		{serf.EventMemberReap, EventReap},
	} {
		ev, ok := eventFromSerf(serf.MemberEvent{Type: tc.typ, Members: []serf.Member{m}}, at)
		if !ok || ev.Kind != tc.want || !ev.At.Equal(at) || len(ev.Members) != 1 {
			t.Fatalf("%v: got %+v, %v", tc.typ, ev, ok)
		}
		got := ev.Members[0]
		if got.Name != "a" || got.Addr != netip.MustParseAddrPort("127.78.0.1:7946") || got.Tags["role"] != "control" || got.Status != StatusAlive {
			t.Errorf("%v: member %+v", tc.typ, got)
		}
	}
	if ev, ok := eventFromSerf(serf.UserEvent{Name: "x"}, at); !ok || ev.Kind != EventUser || ev.Name != "x" {
		t.Errorf("user event translated to %+v, %v", ev, ok)
	}
	if _, ok := eventFromSerf(&serf.Query{Name: "q"}, at); ok {
		t.Error("a query was translated")
	}
}

func TestMembersFromSerf(t *testing.T) {
	ms := []serf.Member{
		{Name: "c", Addr: net.ParseIP("::1"), Port: 1, Status: serf.StatusFailed},
		{Name: "a", Addr: net.IPv4(127, 0, 0, 1), Port: 1, Status: serf.StatusAlive},
		{Name: "b", Addr: net.IPv4(127, 0, 0, 2), Port: 1, Status: serf.StatusAlive},
		{Name: "d", Addr: net.IPv4(127, 0, 0, 4), Port: 1, Status: serf.StatusLeft},
		{Name: "e", Addr: net.IPv4(127, 0, 0, 5), Port: 1, Status: serf.StatusLeaving},
	}
	got := membersFromSerf(ms, map[string]bool{"b": true, "c": true}) // a failed member stays failed
	want := []Status{StatusAlive, StatusSuspect, StatusFailed, StatusLeft, StatusLeaving}
	for i, m := range got {
		if m.Name != string(rune('a'+i)) || m.Status != want[i] {
			t.Errorf("member %d = %s %s, want %c %s", i, m.Name, m.Status, 'a'+i, want[i])
		}
	}
	if got[2].Addr.Addr() != netip.MustParseAddr("::1") {
		t.Errorf("IPv6 address = %v", got[2].Addr)
	}
}

func TestLogSink(t *testing.T) {
	var buf bytes.Buffer
	s := newLogSink(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), time.Second)
	l := s.logger()
	l.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:5")
	l.Printf("[WARN] serf: Shutdown without a Leave")
	l.Printf("[ERR] memberlist: failed to receive: no installed keys could decrypt the message from=127.0.0.1:6")
	l.Printf("[ERR] memberlist: Decrypt packet failed: payload is too small to decrypt: 3 from=127.0.0.1:7")
	l.Printf("[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted")
	l.Printf("Err: Could not set the deadline: x")
	if got := s.keyErrors.Load(); got != 3 {
		t.Errorf("key errors = %d, want 3", got)
	}
	out := buf.String()
	for _, want := range []string{
		`level=DEBUG msg="Stream connection" lib=memberlist from=127.0.0.1:5`,
		`level=WARN msg="Shutdown without a Leave" lib=serf`,
		`level=WARN msg="failed to receive: no installed keys could decrypt the message" lib=memberlist from=127.0.0.1:6 code=` + string(codes.GossipKey),
		`level=INFO msg="Err: Could not set the deadline: x" lib=""`,
	} {
		if !bytes.Contains([]byte(out), []byte(want)) {
			t.Errorf("log lacks %s\n%s", want, out)
		}
	}
}

func TestJoinErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  string
		want codes.Code
	}{
		{"failed to join 1.2.3.4:7946: no installed keys could decrypt the message", codes.GossipKey},
		{"failed to join 1.2.3.4:7946: remote error: No installed keys could decrypt the message", codes.GossipKey},
		{"failed to join 1.2.3.4:7946: EOF", codes.GossipKey},
		{"failed to join 1.2.3.4:7946: unexpected EOF", codes.GossipKey},
		{"failed to join 1.2.3.4:7946: dial tcp 1.2.3.4:7946: connect: connection refused", codes.GossipJoin},
		{"failed to join 1.2.3.4:7946: i/o timeout", codes.GossipJoin},
	} {
		if got := codes.Of(joinError([]string{"1.2.3.4:7946"}, errors.New(tc.err))); got != tc.want {
			t.Errorf("%q: code %q, want %q", tc.err, got, tc.want)
		}
	}
	mixed := multi{errors.New("failed to join a: connection refused"), errors.New("failed to join b: no installed keys could decrypt the message")}
	err := joinError([]string{"a", "b"}, mixed)
	if codes.Of(err) != codes.GossipKey || !errors.Is(err, mixed[1]) {
		t.Errorf("mixed failures: %v, want %s wrapping each peer's error", err, codes.GossipKey)
	}
}

// multi mimics go-multierror's shape, as memberlist returns it.
type multi []error

func (m multi) Error() string          { return fmt.Sprint([]error(m)) }
func (m multi) WrappedErrors() []error { return m }

func TestShutdownLifecycle(t *testing.T) {
	n := start(t, testConfig(t, "solo", newKey(t)))
	n.await(t, 0, EventJoin, "solo") // serf announces the local node too
	if err := n.g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := n.g.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	for range n.g.Events() { // closed: the range ends
	}
	if _, err := n.g.Join(t.Context(), []string{"127.0.0.1:7946"}); codes.Of(err) != codes.GossipJoin {
		t.Errorf("Join after Shutdown: %v", err)
	}
	if err := n.g.Leave(t.Context()); !errors.Is(err, errShutdown) {
		t.Errorf("Leave after Shutdown: %v", err)
	}
	if err := n.g.SetTags(map[string]string{"a": "b"}); !errors.Is(err, errShutdown) {
		t.Errorf("SetTags after Shutdown: %v", err)
	}
	if got := names(n.g.Members()); len(got) != 1 || got[0] != "solo" {
		t.Errorf("Members after Shutdown = %v", got)
	}
}

func TestLeaveBoundedByContext(t *testing.T) {
	a := start(t, testConfig(t, "a", newKey(t)))
	b := start(t, testConfig(t, "b", a.cfg.Keys[0]))
	if _, err := b.g.Join(t.Context(), []string{a.addr()}); err != nil {
		t.Fatal(err)
	}
	a.await(t, 0, EventJoin, "b")
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	// The leave propagation delay alone (200ms) outlasts the context.
	if err := b.g.Leave(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Leave(1ms) = %v, want DeadlineExceeded", err)
	}
	a.await(t, 0, EventLeave, "b") // the leave still completes
	if err := b.g.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
