package handshake

// meshd patch (third_party/nebula/PATCHES.md): read a stage 1's initiator
// index without the certificate check and the Noise response, so that a
// copy of a stage 1 already answered can be found before that work.

import (
	"fmt"

	"github.com/slackhq/nebula/header"
)

// PeekInitiatorIndex returns the initiator index a first handshake message
// (packet, header included) carries, read on a throwaway responder noise
// state built from cred. For IX the first message is the initiator's
// ephemeral and static keys and the payload, none of them encrypted, so
// reading it costs hashing and no Diffie-Hellman; nothing is verified, and
// the caller may use the index only to find a tunnel whose stored stage 1
// is byte for byte this packet (which was verified when it was first read).
func PeekInitiatorIndex(cred *Credential, subtype header.MessageSubType, packet []byte) (uint32, error) {
	if cred == nil {
		return 0, ErrNoCredential
	}
	if len(packet) < header.Len {
		return 0, ErrPacketTooShort
	}
	info, err := subtypeInfoFor(subtype)
	if err != nil {
		return 0, err
	}
	if len(info.msgs) == 0 || !info.msgs[0].expectsPayload {
		return 0, ErrMissingContent
	}
	hs, err := cred.buildHandshakeState(false, info.pattern)
	if err != nil {
		return 0, fmt.Errorf("build noise state: %w", err)
	}
	msg, _, _, err := hs.ReadMessage(nil, packet[header.Len:])
	if err != nil {
		return 0, fmt.Errorf("noise ReadMessage: %w", err)
	}
	p, err := UnmarshalPayload(msg)
	if err != nil {
		return 0, fmt.Errorf("unmarshal handshake: %w", err)
	}
	if p.InitiatorIndex == 0 {
		return 0, ErrInvalidRemoteIndex
	}
	return p.InitiatorIndex, nil
}
