package enroll

import (
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
)

// Clock-skew bounds (DESIGN §10, issue 11). A joiner learns a seed's time
// over the pinned TLS session before it sends the token's secret; the seed
// judges the time the joiner claims in its request.
const (
	// DefaultMaxSkew is the most two clocks may differ before a join is
	// refused with codes.ClockSkew (meshd.yaml max_clock_skew).
	DefaultMaxSkew = 5 * time.Minute
	// WarnSkew is the difference past which a join goes on with
	// codes.ClockSkewWarning.
	WarnSkew = 30 * time.Second
)

// Skew is what two clocks read at (about) the same instant: this machine's
// and a seed's (or, on the seed, its own and what a joiner claims).
type Skew struct {
	Peer  string    // whose clock Remote is: "seed 10.0.0.1:7300", "joiner w1"
	Local time.Time // this machine's clock
	// Remote is the peer's clock. A joiner puts its clock at the midpoint
	// of the request that asked for it, so the round trip does not count.
	Remote time.Time
}

// Offset is how far the peer's clock runs ahead of this one (negative:
// behind).
func (s Skew) Offset() time.Duration { return s.Remote.Sub(s.Local) }

// Judge fails with codes.ClockSkew when the clocks differ by more than max,
// showing both; it reports warn when they differ by more than WarnSkew (or
// max, if that is smaller) but not more than max.
func (s Skew) Judge(max time.Duration) (warn bool, err error) {
	d := absDuration(s.Offset())
	if d > max {
		return false, codes.Wrap(codes.ClockSkew, fmt.Errorf("%s: %s apart, more than the %s allowed (max_clock_skew)", s, d.Round(time.Millisecond), max))
	}
	return d > min(WarnSkew, max), nil
}

// String shows both clocks and which one is ahead.
func (s Skew) String() string {
	ahead := "this machine's clock is ahead"
	if s.Offset() > 0 {
		ahead = "this machine's clock is behind"
	}
	return fmt.Sprintf("this machine's clock reads %s, %s's reads %s (%s by %s)",
		s.Local.UTC().Format(time.RFC3339), s.Peer, s.Remote.UTC().Format(time.RFC3339), ahead,
		absDuration(s.Offset()).Round(time.Second))
}

// midpoint is the instant halfway between sent and received.
func midpoint(sent, received time.Time) time.Time { return sent.Add(received.Sub(sent) / 2) }

// TimeResponse is the answer of GET TimePath: the seed's clock.
type TimeResponse struct {
	ServerTime time.Time `json:"server_time"`
	// STUNPort is the UDP port this control node answers STUN Binding
	// requests on (ports.stun). Absent (0) from a release without the
	// responder: a joiner then cannot read a missing STUN answer as UDP
	// blocked (netcheck.TCPProbe).
	STUNPort int `json:"stun_port,omitempty"`
	// Revocations is the version of the revocation list the seed knows
	// (its length, which only grows), and RevokedSeeds the SHA-256
	// fingerprints of the TLS leaves of control nodes that departed, as
	// that list holds them: the joiner refuses a seed whose own leaf the
	// freshest answer it has seen lists (seedrevoked.go). Absent from a
	// release before issue 52.
	Revocations  int      `json:"revocations,omitempty"`
	RevokedSeeds []string `json:"revoked_seeds,omitempty"`
}
