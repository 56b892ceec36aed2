package codes

// Enrolment keys, joins by identity and ephemeral nodes (issue 31).
const (
	// KeyExhausted: a reusable enrolment key has admitted as many
	// machines as its uses allow.
	KeyExhausted Code = "X401050KEYUSD"
	// KeyPrefixTaken: a new key's name prefix starts, or is started by,
	// the prefix of a live key: the two could give the same names.
	KeyPrefixTaken Code = "X409051KEYPFX"
	// KeyBadLimits: a key's uses, lifetime or name prefix is out of
	// bounds.
	KeyBadLimits Code = "X400052KEYLIM"
	// JWTInvalid: the join's JWT is not a signed JWT this cluster can
	// verify (malformed, bad signature, unsupported algorithm, unknown key).
	JWTInvalid Code = "X401060JWTBAD"
	// JWTIssuerUnknown: no trusted issuer of this control node is the
	// JWT's issuer.
	JWTIssuerUnknown Code = "X401061JWTISS"
	// JWTAudience: the JWT is not for this cluster's audience.
	JWTAudience Code = "X401062JWTAUD"
	// JWTExpired: the JWT's expiry has passed or its not-before is ahead.
	JWTExpired Code = "X401063JWTEXP"
	// JWTLifetime: the JWT lives longer than an hour or lacks exp, iat
	// or jti.
	JWTLifetime Code = "X401064JWTTTL"
	// JWTReplayed: the JWT's jti was used by an earlier join.
	JWTReplayed Code = "X401065JWTRPL"
	// JWTNoRule: no claim rule of the issuer admits this JWT.
	JWTNoRule Code = "X403066JWTRUL"
	// EventNodeReaped: an ephemeral node was down (failed or left) for
	// its window and was removed.
	EventNodeReaped Code = "X100670EPHRMV"
	// EventNodeForgotten: a removed ephemeral node's record was deleted;
	// its name and overlay IP are free.
	EventNodeForgotten Code = "X100671NDFRGT"
	// RouteBad: a routed prefix is malformed, IPv6, overlaps the overlay
	// or another prefix of the same request, or the node may not carry
	// routes (not an active member).
	RouteBad Code = "X400680RTEBAD"
	// RouteOverlap: the prefix overlaps, without being equal to, a prefix
	// another node is approved to carry (issue 52; an entry of the
	// release before: that another node asks to carry).
	RouteOverlap Code = "X409681RTEOVL"
	// RouteUnderlay: the prefix holds a control node's or relay's
	// underlay address.
	RouteUnderlay Code = "X409682RTEUND"
	// RouteNotRequested: the node has not asked to carry the prefix, or
	// is not approved for it.
	RouteNotRequested Code = "X404683RTENRQ"
	// CarrierChanged: the prefix's carrier changed since the move was
	// decided.
	CarrierChanged Code = "X409684RTECAS"
	// ExitNotApproved: `meshctl exit use` names a node that is not an
	// approved, active exit node.
	ExitNotApproved Code = "X404685EXTNOT"
	// CarrierUnreachable: `routes prefer` names a router that does not
	// answer over the overlay.
	CarrierUnreachable Code = "X503690RTEUNR"
	// Overlay6Invalid: an IPv6 overlay prefix is not IPv6, is IPv4-mapped,
	// has host bits set, is shorter than /64, or cannot hold an address
	// for every address of the IPv4 overlay.
	Overlay6Invalid Code = "X400700OVLBAD"
	// Overlay6NotULA: an IPv6 overlay prefix outside fd00::/8 without
	// --overlay6-global.
	Overlay6NotULA Code = "X400701OVLULA"
	// Overlay6Exists: a move to v2 certificates and an IPv6 overlay asked
	// of a cluster that is dual-stack already.
	Overlay6Exists Code = "X409702OVLDUA"
	// NebulaOnlyToken: a meshd join (`meshctl join`) brought a token
	// minted for a stock Nebula member (`admit --nebula-only`).
	NebulaOnlyToken Code = "X400710NEBTKN"
	// NotNebulaToken: a bundle request (`meshctl nebula-bundle`) brought
	// a token minted for a meshd member, or a plain token for a renewal.
	NotNebulaToken Code = "X400711NEBMSH"
	// NebulaKeyCurve: a stock Nebula member's public key is not a Nebula
	// X25519 public key (P-256, another PEM type, a bad length).
	NebulaKeyCurve Code = "X400712NEBCRV"
	// NebulaKeyInUse: a stock Nebula member's public key is the key of
	// another node of the cluster.
	NebulaKeyInUse Code = "X409713NEBKEY"
	// NebulaRenewRefused: a renewal names no active stock Nebula member,
	// or brings another key than the one the member holds.
	NebulaRenewRefused Code = "X409714NEBRNW"
	// EventNebulaMemberRenewed: a stock Nebula member's certificate was
	// renewed with a renewal token.
	EventNebulaMemberRenewed Code = "X100715NEBREN"
	// EventRoutesRequested: a node asked to carry a set of prefixes.
	EventRoutesRequested Code = "X100686RTEREQ"
	// EventRouteApproved: a prefix was approved for a node.
	EventRouteApproved Code = "X100687RTEAPR"
	// EventRouteWithdrawn: a prefix's approval was taken back.
	EventRouteWithdrawn Code = "X100688RTEWDR"
	// EventCarrierMoved: another node carries a prefix now.
	EventCarrierMoved Code = "X100689RTEMOV"
	// RemovedByCluster: the cluster no longer knows this node (issue 52
	// item 9): every control node asked in one round refused it as not a
	// member (NotMember), or its own record reads removed, left or failed.
	// meshd stops its overlay and its names, says so in `meshctl status`,
	// and asks again at most once a minute.
	RemovedByCluster Code = "X410750REMOVD"
	// JoinUndone: a join the cluster had admitted failed on the joining
	// machine before it confirmed, and the cluster undid the admission
	// (issue 52 item 10): the token can be used again.
	JoinUndone Code = "X500760JNUNDO"
	// JoinSpent: the same failure, but undoing the admission failed too:
	// the token stays used, and the cluster marks the join failed.
	JoinSpent Code = "X500761JNSPNT"
	// EventJoinAborted: a joiner undid its own admission after it failed
	// before confirming; its certificates are revoked, its token unused.
	EventJoinAborted Code = "X100762JNABRT"
	// JoinConfirmed: an undo asked of a join the cluster confirmed
	// already; an active node's admission is never undone.
	JoinConfirmed Code = "X409763JNCNFD"
	// JoinUndoLimit: the token, key or JWT gave back as many failed joins
	// as the cluster gives back; this one is not undone.
	JoinUndoLimit Code = "X409764JNUNLM"
)
