// Package gossiptest forges gossip as any holder of a cluster's gossip key
// can, for tests of what members make of it: memberlist's dead message and
// serf's leave intent about another member, each a UDP packet encrypted
// as memberlist encrypts one (issue 52 item 8: any member's machine holds
// the key, and neither message says who first said it).
//
// Import rule (deps_test.go): may import no meshd package. Nor does it
// link memberlist or serf: the wire format is written out here, so the
// forgery does not lean on the libraries it fools.
package gossiptest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
)

// Message types on the wire: memberlist's (net.go: deadMsg, userMsg) and
// serf's inside a memberlist user message (messages.go:
// messageLeaveType).
const (
	memberlistDead = 5
	memberlistUser = 8
	serfLeave      = 0
)

// Dead is memberlist's dead message about node, as if node said it of
// itself (From is node: a graceful leave, shown left once serf has seen a
// leave intent, failed otherwise), at incarnation: a receiver takes it if
// incarnation is at least the one it holds for node. Encrypted with key
// (16, 24 or 32 bytes), as a member sends it to a member's gossip port
// over UDP.
func Dead(key []byte, node string, incarnation uint32) ([]byte, error) {
	msg := []byte{memberlistDead, 0x83} // a map of three
	msg = appendStr(msg, "Incarnation")
	msg = binary.BigEndian.AppendUint32(append(msg, 0xce), incarnation)
	msg = appendStr(appendStr(msg, "Node"), node)
	msg = appendStr(appendStr(msg, "From"), node)
	return seal(key, msg)
}

// Leave is serf's leave intent about node at Lamport time ltime, in a
// memberlist user message: a receiver takes it, and passes it on, if
// ltime is past the last it holds for node's status. Encrypted as Dead.
func Leave(key []byte, node string, ltime uint64) ([]byte, error) {
	msg := []byte{memberlistUser, serfLeave, 0x83}
	msg = appendStr(msg, "LTime")
	msg = binary.BigEndian.AppendUint64(append(msg, 0xcf), ltime)
	msg = appendStr(appendStr(msg, "Node"), node)
	msg = append(appendStr(msg, "Prune"), 0xc2) // false
	return seal(key, msg)
}

// appendStr appends s as a msgpack string.
func appendStr(b []byte, s string) []byte {
	switch {
	case len(s) < 32:
		b = append(b, 0xa0|byte(len(s)))
	case len(s) < 256:
		b = append(b, 0xd9, byte(len(s)))
	default:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(len(s)))
	}
	return append(b, s...)
}

// seal encrypts msg as memberlist does with no label (security.go,
// encryption version 1): the version, a 12-byte nonce, then AES-GCM.
func seal(key, msg []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return gcm.Seal(append([]byte{1}, nonce...), nonce, msg, nil), nil
}
