package control

import (
	"testing"
	"time"
)

// TestNewTokenRetention: a zero or negative retention means the default;
// a set one is kept as it is.
func TestNewTokenRetention(t *testing.T) {
	for _, tc := range []struct {
		set, want time.Duration
	}{
		{0, DefaultTokenRetention},
		{-time.Hour, DefaultTokenRetention},
		{time.Hour, time.Hour},
		{time.Nanosecond, time.Nanosecond},
	} {
		p := New(Config{TokenRetention: tc.set}, nil, nil, nil, Deps{})
		if p.cfg.TokenRetention != tc.want {
			t.Errorf("retention %s: plane uses %s, want %s", tc.set, p.cfg.TokenRetention, tc.want)
		}
	}
}
