package agent

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
)

// newID returns 16 random bytes as 32 hex characters: node and cluster ids.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newGossipKey returns a 32-byte key for memberlist's AES-256-GCM.
func newGossipKey() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// defaultNodeName is the hostname, lowercased and cut at the first dot.
func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	h, _, _ = strings.Cut(strings.ToLower(h), ".")
	return h
}
