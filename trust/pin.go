package trust

// PinProtoPrefix starts the ALPN protocol name a joiner offers to name
// the CA its token pins (PinProto).
const PinProtoPrefix = "meshd-ca-"

// PinProto is the ALPN protocol a joiner offers (before "http/1.1") to say
// which CA its token pins: "meshd-ca-" and the first 32 hex characters of
// its fingerprint. During a CA rotation a seed whose leaf was reissued
// under the next CA answers it with the leaf it still holds under the
// pinned one. (ALPN, not the server name: a seed given by DNS name is
// asked for by that name.) Servers negotiate no such protocol; "http/1.1"
// is what is spoken.
func PinProto(pin Fingerprint) string {
	return PinProtoPrefix + pin.String()[:32]
}
