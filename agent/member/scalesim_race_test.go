//go:build race

package member

// simRace reports a -race build: TestIdleLoopsDoNotScan starts Nebula,
// whose handshake manager races (HandshakeHostInfo.cachePacket against
// continueHandshake: why make unit runs ./mesh without -race), so it runs
// without -race only.
const simRace = true
