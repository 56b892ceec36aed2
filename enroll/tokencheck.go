package enroll

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// validate checks every field; Encode and ParseToken share it, so anything
// ParseToken accepts encodes back to the same string.
func (t Token) validate() error {
	if t.JWT != "" {
		return codes.Wrap(codes.BadRequest, errors.New("a join by JWT has no token to encode"))
	}
	if b, err := hex.DecodeString(t.ClusterID); err != nil || len(b) != clusterIDSize || strings.ToLower(t.ClusterID) != t.ClusterID {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("cluster id %q: want %d lowercase hex characters", t.ClusterID, 2*clusterIDSize))
	}
	if t.CA.IsZero() {
		return codes.Wrap(codes.BadRequest, errors.New("token without a CA fingerprint"))
	}
	if t.NextCA == t.CA {
		return codes.Wrap(codes.BadRequest, errors.New("token whose next CA is its current CA"))
	}
	if t.Secret.IsZero() {
		return codes.Wrap(codes.BadRequest, errors.New("token without a secret"))
	}
	if t.Expires.Unix() <= 0 {
		return codes.Wrap(codes.BadRequest, errors.New("token without an expiry"))
	}
	if t.Key {
		if err := ValidKeyPrefix(t.Name); err != nil {
			return err
		}
		if t.Role != trust.RoleWorker {
			return codes.Wrap(codes.BadRole, fmt.Errorf("a key admits workers, not %q", t.Role))
		}
	} else if err := ValidName(t.Name); err != nil {
		return err
	}
	if roleByte(t.Role) == 0 {
		return codes.Wrap(codes.BadRole, fmt.Errorf("role %q: want worker, control or nebula", t.Role))
	}
	if t.Renew && t.Role != trust.RoleNebula {
		return codes.Wrap(codes.BadRole, fmt.Errorf("a renewal token renews a stock Nebula member, not a %s node", t.Role))
	}
	if len(t.Seeds) == 0 || len(t.Seeds) > MaxSeeds {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("%d seeds: want 1 to %d", len(t.Seeds), MaxSeeds))
	}
	for _, s := range t.Seeds {
		if err := validSeed(s); err != nil {
			return codes.Wrap(codes.BadRequest, err)
		}
	}
	if len(t.SeedIDs) != 0 && len(t.SeedIDs) != len(t.Seeds) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("%d seed ids for %d seeds", len(t.SeedIDs), len(t.Seeds)))
	}
	for _, id := range t.SeedIDs {
		if err := validSeedID(id); err != nil {
			return codes.Wrap(codes.BadRequest, err)
		}
	}
	return nil
}

// validSeedID accepts a node id of 1 to MaxSeedIDLen letters, digits and
// dashes.
func validSeedID(id string) error {
	if id == "" || len(id) > MaxSeedIDLen {
		return fmt.Errorf("seed id of %d bytes: want 1 to %d", len(id), MaxSeedIDLen)
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("seed id %q: want letters, digits and dashes", id)
		}
	}
	return nil
}

// validSeed accepts "host:port" with an IP address or DNS name and a port
// in 1..65535.
func validSeed(s string) error {
	if len(s) > MaxSeedLen {
		return fmt.Errorf("seed of %d bytes, at most %d", len(s), MaxSeedLen)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("seed %q: %w", s, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("seed %q: bad port", s)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if host == "" {
		return fmt.Errorf("seed %q: empty host", s)
	}
	for _, c := range []byte(host) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("seed %q: bad host", s)
		}
	}
	return nil
}

func roleByte(r trust.Role) byte {
	switch r {
	case trust.RoleWorker:
		return roleByteWorker
	case trust.RoleControl:
		return roleByteControl
	case trust.RoleNebula:
		return roleByteNebula
	}
	return 0
}

func checksum(payload []byte) uint32 {
	c := crc32.Update(0, castagnoli, []byte(tokenPrefix))
	return crc32.Update(c, castagnoli, payload)
}

func corrupt(why string) error {
	return codes.Wrap(codes.TokenCorrupt, fmt.Errorf("join token is truncated or corrupt: %s", why))
}

// CheckExpiry fails with codes.TokenExpired once now has reached t.Expires.
func (t Token) CheckExpiry(now time.Time) error {
	if now.Before(t.Expires) {
		return nil
	}
	return codes.Wrap(codes.TokenExpired, fmt.Errorf("join token for %s expired at %s", t.Name, t.Expires.UTC().Format(time.RFC3339)))
}

// ValidName checks a node name: 1-63 characters of a-z, 0-9 and '-',
// starting and ending with a letter or digit (a DNS label). Otherwise it
// fails with codes.BadNodeName.
func ValidName(name string) error {
	bad := len(name) == 0 || len(name) > 63 || name[0] == '-' || name[len(name)-1] == '-'
	for i := 0; i < len(name) && !bad; i++ {
		c := name[i]
		bad = !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if bad {
		return codes.Wrap(codes.BadNodeName, fmt.Errorf("node name %q: want 1-63 of a-z, 0-9, '-', starting and ending with a letter or digit", name))
	}
	return nil
}

// CheckTTL accepts a token lifetime from MinTTL to MaxTTL; otherwise it
// fails with codes.TokenBadTTL.
func CheckTTL(d time.Duration) error {
	if d < MinTTL || d > MaxTTL {
		return codes.Wrap(codes.TokenBadTTL, fmt.Errorf("token lifetime %s: want %s to %s", d, MinTTL, MaxTTL))
	}
	return nil
}
