package codes

// The codes. Names say what happened; the number groups them:
// 0xx token, 1xx trust and enrollment, 2xx cluster and raft, 3xx local
// daemon and API, 4xx files and config, 5xx gossip and overlay, 9xx generic.
const (
	// Join token.
	TokenCorrupt    Code = "X400001TKNCRP"
	TokenVersion    Code = "X400002TKNVER"
	TokenExpired    Code = "X401003TKNEXP"
	TokenConsumed   Code = "X401004TKNCNS"
	TokenWrongAddr  Code = "X403005TKNADR"
	TokenUnknown    Code = "X401006TKNUNK"
	TokenNameDiffer Code = "X403007TKNNAM"
	TokenBadTTL     Code = "X400008TKNTTL"
	// ClockSkewWarning: the clocks differ by more than 30 s but less
	// than the bound (max_clock_skew); the join goes on.
	ClockSkewWarning Code = "X200009CLKSKW"
	TokenThrottled   Code = "X429010TKNTHR"
	TokenRevoked     Code = "X401011TKNRVK"
	// ClockSkew: the clocks differ by more than max_clock_skew; the join
	// is refused before the token's secret is sent (joiner) or before the
	// ledger is read (seed).
	ClockSkew Code = "X412012CLKOFF"

	// Trust and enrollment.
	CAMismatch       Code = "X495101CAPINF"
	SeedNotControl   Code = "X495102SEEDRL"
	NameTaken        Code = "X409103NAMTKN"
	SeedsUnreachable Code = "X503104SEEDUN"
	EnrollRejected   Code = "X400105ENRBAD"
	AlreadyJoined    Code = "X409106ALRJND"
	AdvertiseAddr    Code = "X400107NICNOF"
	BadNodeName      Code = "X400108BADNAM"
	BadRole          Code = "X400109BADROL"
	CAHolderDown     Code = "X503110CAUNRC"
	PeerRoleDenied   Code = "X403111ROLDNY"
	JoinUnconfirmed  Code = "X504112JNUNCF"
	SignRefused      Code = "X403113SGNRFS"
	CertRefused      Code = "X400114CRTRFS"
	NotMember        Code = "X403115NOTMBR"
	ForwardRefused   Code = "X403116FWDREF"
	ClonedIdentity   Code = "X409117CLONED"
	// SeedNotNamed: the seed's leaf is a control node's, of the pinned
	// CA, but not the node the token names at that address (issue 27).
	SeedNotNamed Code = "X495118SEEDID"
	// SeedRevoked: the seed presents the leaf of a control node that
	// departed (issue 52); the joiner sends it nothing.
	SeedRevoked Code = "X495716SEEDRV"
	// SeedSlow: a seed answered a join late (issue 54 item 5); the join
	// went on. Warning.
	SeedSlow Code = "X200795SEEDSL"
	// FactsRefused: a member's report of its facts (issue 54 item 3)
	// carried a CA report its recorded TLS key did not sign.
	FactsRefused Code = "X403796FCTSIG"
	// NodeNotFormer: `meshctl forget` of a node that is still a member.
	NodeNotFormer Code = "X409717NDNOTF"
	// UnderlayFamily: the pinned underlay (--advertise-addr or
	// --advertise-iface, or the config's) is of an address family, IPv4
	// or IPv6, that none of the token's seeds has, or this host has
	// addresses of the other family only (issue 34).
	UnderlayFamily Code = "X400119UNDFAM"

	// Cluster and raft.
	AlreadyInitialised Code = "X409201ALRINI"
	NotInCluster       Code = "X409202NOCLST"
	NotControl         Code = "X403203NOTCTL"
	NoLeader           Code = "X503204NOLEAD"
	RaftApply          Code = "X503205RFTAPL"
	NodeUnknown        Code = "X404206NODUNK"
	QuorumLoss         Code = "X409207QRMLSS"
	SnapshotVersion    Code = "X500208SNPVER"
	CAHolderStays      Code = "X409209CAHOLD"
	// CA custody (issue 13: handoff, backup, restore).
	NotCAHolder      Code = "X409230NOTCAH"
	CustodyTarget    Code = "X409231CATRGT"
	CAProbeFailed    Code = "X502232CAPROB"
	CAHolderAlive    Code = "X409233CAALIV"
	BackupPassphrase Code = "X401234CABKPW"
	BackupCorrupt    Code = "X400235CABKCR"
	CAOtherCluster   Code = "X409236CAOTHR"
	CAPassphrase     Code = "X400237CAPASS"
	CAHolderChanged  Code = "X409238CAHCHG"
	// CABackupNoNext: a restore during a CA rotation from a backup that
	// does not hold the rotation's next CA.
	CABackupNoNext Code = "X409240CABKNX"

	// Metrics and quorum health (issue 14).
	MetricsAddrRefused Code = "X400250MTRADR"
	// QuorumAtRisk, NoLeaderWarning: warnings in `meshctl status`.
	QuorumAtRisk    Code = "X200251QRMRSK"
	NoLeaderWarning Code = "X200252NOLDRW"

	// Control plane load (issue 32): a control node's bound per second
	// on the calls every worker makes on its own (tunnel reports, node
	// lists, strict changes) was reached: the caller's own, its source
	// network's, or the shared one (issue 52).
	ControlBusy Code = "X429260CTLBSY"

	// Local daemon and API.
	DaemonStarting    Code = "X503301STRTNG"
	DaemonUnreachable Code = "X503302DMNUNR"
	// DaemonStopping: meshd got SIGTERM (or was stopped) and is shutting
	// down; every local route answers it from then until the socket closes.
	DaemonStopping Code = "X503309STOPNG"
	// SeedUnfit: a control node whose disk fails its write check, or
	// whose clock is off from the other control nodes', answers joins
	// with this; the joiner moves on to the token's next seed (issue 28).
	SeedUnfit Code = "X503660SDUNFT"
	// DiskCheckFailed: the state dir failed its periodic write check for
	// another reason than a full filesystem (a status warning).
	DiskCheckFailed Code = "X507661DSKCHK"
	// ClockUntrusted: this control node's clock is more than
	// max_clock_skew from the median of the control nodes' clocks: it
	// mints no token and serves no join (status warning and refusal).
	ClockUntrusted Code = "X412662CLKUNT"
	// ClockPeerSkewed: a status warning on a control node whose own clock
	// agrees with the median: another control node's does not.
	ClockPeerSkewed  Code = "X200663CLKPER"
	BadRequest       Code = "X400303BADREQ"
	PermissionDenied Code = "X403304PRMDNY"
	UnknownCode      Code = "X404305UNKCOD"
	Busy             Code = "X409306BUSYOP"
	PortInUse        Code = "X409307PRTUSE"
	// AlreadyRunning: another meshd holds this state dir or answers on
	// this socket; the message names its PID.
	AlreadyRunning Code = "X409308ALRRUN"
	// AmbiguousCode: `meshctl explain` was given text that names more than
	// one code (e.g. TKN); the detail lists them.
	AmbiguousCode Code = "X400340AMBCOD"
	// The web console, `meshctl ui` (issue 15; console/).
	ConsoleAddr   Code = "X400360UIADDR"
	ConsoleSecret Code = "X403361UISECR"
	ConsoleCSRF   Code = "X403362UICSRF"
	ConsoleOrigin Code = "X403363UIORIG"
	ConsoleHost   Code = "X403364UIHOST"
	ConsoleForm   Code = "X400365UIFORM"
	ConsolePage   Code = "X404366UIPAGE"

	// Files and config.
	KeyPermissions Code = "X400401KEYPRM"
	ConfigInvalid  Code = "X400402BADCFG"
	StateDir       Code = "X500403STATEF"
	RestartNeeded  Code = "X200404RSTREQ"
	// StateCorrupt: a file of the state dir does not parse; the message
	// names it. meshd refuses to start and changes nothing.
	StateCorrupt Code = "X500405CORRPT"
	// DiskFull: a write to the state dir found no space (ENOSPC, EDQUOT);
	// the message names the path.
	DiskFull Code = "X507406DSKFUL"

	// Gossip and overlay.
	GossipKey      Code = "X401501GSPKEY"
	GossipJoin     Code = "X503502GSPJON"
	OverlayApply   Code = "X500503OVLAPL"
	OverlayUnreach Code = "X504504OVLUNR"
	// GossipMemberIgnored: a gossip member with no active record, or whose
	// tags disagree with its record, contributes nothing (a warning).
	GossipMemberIgnored Code = "X200505GSPIGN"
	// GossipContradicted: gossip said a member with an active record
	// failed or left, and this node's direct probe of its overlay address
	// answered: it is shown, and kept, alive (a warning; issue 52 item 8).
	GossipContradicted Code = "X200740GSPCTR"
	// OffloadRefused: the kernel or the device refused a Nebula offload
	// the overlay asked for (a warning; issue 53 item 2).
	OffloadRefused     Code = "X200780OFFLDN"
	KeyRotationStalled Code = "X504506KEYSTL"
	// CA rotation (issue 13 item 4).
	CARotationStalled Code = "X504239CAROTS"
	RevocationPending Code = "X200507RVKPND"
	TunUnavailable    Code = "X503508TUNDEV"
	// Overlay firewall, node groups and ping (issue 14 item 9).
	FirewallRule Code = "X400520FWRULE"
	BadGroup     Code = "X400521BADGRP"
	PingLost     Code = "X504522PNGLST"
	// Pair health (issue 28 item 4): this node's own probes cannot reach
	// a member over the overlay (a warning).
	PairUnreachable Code = "X200523PAIRBR"
	// Names (issue 30): warnings of `meshctl status` about the DNS.
	DNSNotServed    Code = "X200550DNSLSN"
	ResolvedNotUsed Code = "X200551RSLVNU"
	// Subnet routes and exit nodes on this host's kernel (issue 33,
	// package hostroute): forwarding, masquerade, the exit's routes
	// and rules.
	HostRouteApply   Code = "X500580HRTAPL"
	HostRouteInvalid Code = "X400581HRTBAD"

	// Generic.
	Internal Code = "X500901INTERR"
)

// table is the one literal list of codes; docs/errors.md is checked against it.
var table = map[Code]Info{

	KeyExhausted:             {401, "the enrolment key has admitted as many machines as its uses allow", "mint a new key on a control node: `meshctl admit --reusable --uses N --name-prefix P`; `meshctl tokens` shows each key's uses left"},
	KeyPrefixTaken:           {409, "another live enrolment key has a name prefix that starts, or is started by, this one: the two could give the same names", "choose a prefix neither starts nor is started by a live key's (`meshctl tokens` lists them), or revoke that key first"},
	KeyBadLimits:             {400, "the enrolment key's uses, lifetime or name prefix is out of bounds", "give --uses 1 to 100000, --ttl 1m to 720h and a --name-prefix of lowercase letters, digits and dashes that starts with a letter and leaves room for a number (at most 56 characters)"},
	JWTInvalid:               {401, "the join's JWT is not a signed JWT this cluster can verify (malformed, bad signature, unsupported algorithm or unknown key)", "check that the file holds the raw token the issuer gave (three base64url parts), that the issuer's JWKS on the control nodes is current, and that the token was not altered"},
	JWTIssuerUnknown:         {401, "no issuer this control node trusts issued the JWT", "add the issuer to `jwt.issuers` in meshd.yaml on every control node (issuer exactly as the token's iss claim) and restart meshd there, or join with a token the trusted issuer gave; an issuer whose keys could not be loaded says why in the detail: fix its jwks_file and run `meshctl reload`"},
	JWTAudience:              {401, "the JWT is not for this cluster's audience", "have the issuer mint the token for the audience configured in `jwt.issuers[].audience` (a CI job's OIDC token request names it)"},
	JWTExpired:               {401, "the JWT has expired or is not valid yet", "fetch a fresh token from the issuer and join at once; check the clocks of the joiner, the issuer and the control nodes"},
	JWTLifetime:              {401, "the JWT lives longer than an hour, or lacks an expiry, issue time or jti", "have the issuer mint short-lived tokens (at most 1 hour) with exp, iat and a unique jti"},
	JWTReplayed:              {401, "the JWT was already used by an earlier join (its jti is recorded)", "fetch a new token from the issuer for each join; if you did not use this one, assume it leaked and check `meshctl audit`"},
	JWTNoRule:                {403, "no claim rule of the issuer admits this JWT's claims", "add a rule to `jwt.issuers[].rules` whose claims match the token, or join from a workload the rules admit"},
	EventNodeReaped:          {100, "an ephemeral node was down (failed or left) for its window and was removed, its certificates revoked", "none needed"},
	EventNodeForgotten:       {100, "a removed ephemeral node's record was deleted; its name and overlay IP are free", "none needed"},
	RouteBad:                 {400, "the routed prefix is not one the cluster takes: malformed, IPv6, host bits set, overlapping the overlay or another prefix of the same request, or asked by a node that is not an active member", "give IPv4 prefixes such as 192.168.50.0/24 that do not overlap the overlay or each other (`meshctl routes advertise CIDR...`); a removed node carries nothing"},
	RouteOverlap:             {409, "the prefix overlaps, without being equal to, a prefix another node is approved to carry (the message names it); requests alone never refuse each other, their overlap is judged at approval", "approve exactly the same prefix on both routers (one carries it, the other stands by), or withdraw the other node's approval first (`meshctl routes withdraw NODE CIDR`, as the message says); `meshctl routes list` shows every prefix asked and approved"},
	RouteUnderlay:            {409, "the prefix holds the underlay address of a control node or relay (a relay counts where the cluster saw its join come from, `seen_from`): every peer would send its tunnel to that node into the tunnel", "advertise a narrower prefix that leaves the control nodes' and relays' addresses out (`meshctl nodes` shows them)"},
	RouteNotRequested:        {404, "the node has not asked to carry that prefix, or is not approved for it", "run `meshctl routes advertise CIDR` on the router first; `meshctl routes list` shows what each node asks and carries"},
	CarrierChanged:           {409, "the prefix's carrier changed while the move was decided; nothing was moved", "look at `meshctl routes list` and run the command again if it still applies"},
	ExitNotApproved:          {404, "the node named is not an active exit node approved by the cluster", "on the exit node run `meshctl routes advertise --exit`, approve it on a control node (`meshctl routes approve NODE 0.0.0.0/0`), then `meshctl exit use NODE`; `meshctl routes list` shows the approved exit nodes"},
	Overlay6Invalid:          {400, "the IPv6 overlay prefix is not one a cluster takes: not IPv6, IPv4-mapped (it would overlap the IPv4 overlay's space), host bits set, shorter than /64, or too long to hold an IPv6 address for every address of the IPv4 overlay; nothing was changed", "give a /64 such as fd5a:1b2c:3d4e::/64 (or leave --overlay-cidr6 out for a generated one); `meshctl init --overlay-cidr6 none` makes an IPv4-only cluster"},
	Overlay6NotULA:           {400, "the IPv6 overlay prefix is not a unique local address (fd00::/8, RFC 4193): a global prefix on the overlay would shadow those addresses on the internet for every member; nothing was changed", "leave --overlay-cidr6 out for a generated ULA /64, give one in fd00::/8, or pass --overlay6-global if the prefix is yours and routed nowhere else"},
	Overlay6Exists:           {409, "the cluster is dual-stack already: its Nebula certificates are v2 and hold an IPv6 overlay address; nothing was changed", "run `meshctl ca rotate` without --overlay-cidr6 for a plain CA rotation; `meshctl ca status` shows the overlays"},
	NebulaOnlyToken:          {400, "the token admits a stock Nebula member (minted with `meshctl admit NAME --nebula-only`), not a machine that runs meshd; nothing was spent", "on the device run `meshctl nebula-bundle --token-file F --out DIR` with this token, or mint a join token without --nebula-only for this machine"},
	NotNebulaToken:           {400, "the token does not admit a stock Nebula member this way: it was minted for a machine that runs meshd, or a renewal was asked with a first token (or a first bundle with a renewal token); nothing was spent", "mint `meshctl admit NAME --nebula-only` for a new member, `meshctl admit NAME --nebula-only --renew` for a renewal (then pass --renew), or join a meshd machine with `meshctl join`"},
	NebulaKeyCurve:           {400, "the public key is not a Nebula X25519 public key (the cluster's Nebula CA is curve 25519; a P-256 key or another PEM block is refused); nothing was spent", "make the key with `nebula-cert keygen` (default curve 25519) or let `meshctl nebula-bundle --generate` make one"},
	NebulaKeyInUse:           {409, "another node of the cluster holds this Nebula public key; nothing was spent", "give each device its own key: make a new one with `nebula-cert keygen` or `meshctl nebula-bundle --generate`"},
	NebulaRenewRefused:       {409, "the renewal names no active stock Nebula member, or brings another key than the one the member's certificate holds; nothing was spent", "renew with the member's own public key (`--pubkey host.pub` or the bundle's host.key); a member that lost its key is removed and admitted again (`meshctl remove NAME`, then `meshctl admit NAME --nebula-only`)"},
	EventNebulaMemberRenewed: {100, "a stock Nebula member's certificate was renewed with a renewal token", "copy the new host.crt to the device and restart or reload its nebula"},
	JoinUndone:               {500, "the join failed on this machine after the cluster had admitted it; the cluster undid the admission (the certificates it signed are revoked) and the token can be used again until it expires", "fix what the message names (the setting and why, or the step that failed), then run the same `meshctl join` again; `meshctl join --plan TOKEN` checks this machine first"},
	JoinSpent:                {500, "the join failed on this machine after the cluster had admitted it, and undoing the admission failed too: the token stays used", "fix what the message names; run the same `meshctl join` again to finish this join before the cluster marks it failed (join_bound), or, once `meshctl nodes` shows it failed, mint a new token (`meshctl admit NAME`) and join with it"},
	JoinConfirmed:            {409, "the join was confirmed already (the node is active): its admission cannot be undone", "nothing to undo: the node is a member (`meshctl status` on it); `meshctl leave` on it, or `meshctl remove NAME` on a control node, ends its membership"},
	JoinUndoLimit:            {409, "the token (or key, or JWT) has given back as many joins that failed on their machine as the cluster gives back (3, a key as many as its uses); this join's admission is not undone", "fix what makes the join fail on this machine (`meshctl join --plan` checks it); the cluster marks this join failed within join_bound; then mint a new token (`meshctl admit NAME`)"},
	EventJoinAborted:         {100, "a joiner undid its own admission after its join failed on its machine before it confirmed: its certificates are revoked and its token is unused again", "none needed; the joiner's `meshctl join` says what failed"},
	CarrierUnreachable:       {503, "the router named does not answer over the overlay: the prefix stays with the router carrying it", "check the router is running and reachable (`meshctl ping NODE`), then run `meshctl routes prefer` again"},
	EventRoutesRequested:     {100, "a node asked to carry a set of prefixes", "approve them on a control node: `meshctl routes approve NODE CIDR`"},
	EventRouteApproved:       {100, "a prefix was approved for a node; its Nebula certificate is reissued to hold it", "none needed"},
	EventRouteWithdrawn:      {100, "a prefix's approval was taken back; the certificates that held it are revoked once a new one is issued", "none needed"},
	EventCarrierMoved:        {100, "another node carries a routed prefix now (its carrier failed, left, lost its approval, or an operator moved it)", "none needed; `meshctl routes list` shows the carriers"},
	RemovedByCluster:         {410, "the cluster no longer knows this node: every control node asked refuses it as not a member, or its own record reads removed, left or failed; meshd stopped its overlay and its names and asks the control nodes again at most once a minute", "run `meshctl leave` on this node to clear its local state, then join again with a new token (`meshctl admit NAME` on a control node, then `meshctl join TOKEN` here); if the removal was a mistake that is undone, meshd restarts its overlay by itself at its next ask"},
	TokenCorrupt:             {400, "the join token is truncated or corrupt (its checksum does not match)", "copy the whole token again from the output of `meshctl admit`, on one line"},
	TokenVersion:             {400, "the join token has an unknown or unsupported version", "mint a new token with `meshctl admit` on a control node running the same meshd version"},
	TokenExpired:             {401, "the join token has expired", "mint a new token with `meshctl admit NAME` (tokens live 15 minutes by default, at most 1 hour)"},
	TokenConsumed:            {401, "the join token has already been used", "each token admits one join; mint a new one with `meshctl admit NAME`"},
	TokenWrongAddr:           {403, "the join token is bound to another source address", "join from the machine the token was minted for, or mint a token without --addr or with this machine's address"},
	TokenUnknown:             {401, "the cluster has no record of this join token", "mint a token with `meshctl admit NAME` on a control node of this cluster"},
	TokenNameDiffer:          {403, "the join request names a different node than the token admits", "join with the token minted for this node's name"},
	TokenBadTTL:              {400, "the token lifetime is out of range", "give --ttl between 1m and 1h"},
	ClockSkewWarning:         {200, "this machine's clock differs from the cluster's by more than 30 seconds", "synchronise the clock (NTP); token expiry and certificates depend on it"},
	ClockSkew:                {412, "this machine's clock differs from the seed's by more than max_clock_skew (5 minutes by default); the token was not used", "synchronise the clock (NTP, e.g. `timedatectl set-ntp true` or `chronyc makestep`) on whichever machine is wrong, then run the same join again"},
	TokenThrottled:           {429, "too many failed join attempts from this address", "wait a minute, then check the token (`meshctl tokens` on a control node) before trying again"},
	TokenRevoked:             {401, "the join token was revoked", "ask a control node for a new one: `meshctl admit NAME`"},

	CAMismatch:       {495, "the seed presented a certificate chain that does not end at the cluster CA pinned in the token", "check that the token's seed address belongs to the cluster that minted it; nothing was sent to the seed"},
	SeedNotControl:   {495, "the seed's certificate is not a control node's server certificate", "join through a control node's enroll address; nothing was sent to the seed"},
	NodeNotFormer:    {409, "the node is still a member: only a node that left, was removed or failed its join is forgotten", "remove it first (`meshctl remove NAME`), then `meshctl forget NAME`"},
	SeedRevoked:      {495, "the seed presents the certificate of a control node that left or was removed: a copy of it may be running", "nothing was sent to it; join through the token's other seeds, or mint a new token with `meshctl admit` on an active control node"},
	SeedNotNamed:     {495, "the seed's certificate belongs to another node than the control node the token names at that address (a removed node, or an address that moved)", "mint a new token with `meshctl admit` on an active control node; nothing was sent to the seed"},
	NameTaken:        {409, "another node, an unused token or a live reusable key already holds this name", "admit the machine under a different name, remove the node that holds it, or revoke the token or key that holds it (`meshctl tokens revoke ID`)"},
	SeedsUnreachable: {503, "no seed in the token could be reached, or none answered in time (a join asks its seeds again for a few seconds first; the message says which accepted the connection and answered late: busy or stuck, not down)", "check that a control node is running and its enroll port (7300/tcp) is reachable from here; a seed that accepted the connection and did not answer: look at its load and `meshctl status`"},
	SeedSlow:         {200, "a seed answered the join late (a second or more from the first connection to its answer, or only when asked again): the control node was busy, not down", "none needed: the join went on; if it repeats, look at the control nodes' load"},
	FactsRefused:     {403, "a member's report of its own facts (version, CA report) was refused: the CA report is not signed by the TLS key raft recorded for it; nothing was written", "none needed if the member's TLS leaf was just reissued (it reports again); if it persists compare its key with its record (`meshctl nodes`), a copy of its identity may be in use"},
	EnrollRejected:   {400, "the control node rejected the enrollment request as malformed", "check that both machines run the same meshd version"},
	AlreadyJoined:    {409, "this node already has a cluster identity", "run `meshctl leave` first, or pass --force to replace the identity"},
	AdvertiseAddr:    {400, "the advertise address is not usable on this machine", "pass --advertise-addr with an IP address assigned to one of this machine's interfaces"},
	UnderlayFamily:   {400, "the pinned underlay address is IPv4 and the token's seeds are IPv6 only, or the reverse, or this host has addresses of the other family only; nothing was changed", "pin an address of the seeds' family with --advertise-addr (or advertise_addr, advertise_iface), or pin none and let the route to the seeds choose; a host without that family needs an address of it (or a token whose seeds have its family: `meshctl admit` on a control node that has one); then run the command again"},
	BadNodeName:      {400, "the node name is not valid", "use 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"},
	BadRole:          {400, "the role is not valid", "use --role worker or --role control"},
	CAHolderDown:     {503, "the CA holder could not be reached to sign certificates", "bring the origin node back; the token was not used and will work once it is reachable"},
	PeerRoleDenied:   {403, "the peer's certificate does not carry the role this endpoint requires", "only control nodes of this cluster may call this endpoint"},
	CertRefused:      {400, "a renewed TLS leaf was refused: it does not certify this node's key, does not chain to the cluster CA, or names another node", "none needed at once: the node keeps its current leaf and retries; if it persists compare the CA holder's record with `meshctl nodes`"},
	JoinUnconfirmed:  {504, "the join was recorded but could not be confirmed in time", "check `meshctl status` on this node and `meshctl nodes` on a control node"},
	SignRefused:      {403, "the CA holder refused to sign: raft records no admission that matches the request (node, state, name, role, overlay IP or public key)", "join again with a fresh token (`meshctl admit NAME`); if it keeps happening, compare `meshctl nodes` on the control nodes and check their meshd versions"},
	NotMember:        {403, "the caller's certificate is not the current certificate of an active member", "check the node with `meshctl nodes` on a control node; a removed or left node must join again with a new token (`meshctl admit NAME`, then `meshctl join`)"},
	ClonedIdentity:   {409, "this node's state dir was made on another machine (/etc/machine-id differs from the one recorded at init or join, or cannot be read): a cloned machine; gossip and the overlay were not started", "do not run the copy as that node: join it as a new one (`meshctl admit NEWNAME` on a control node, then `meshctl join --force TOKEN` here); the original keeps its identity (if the original is gone, `meshctl remove NAME` first)"},
	ForwardRefused:   {403, "the leader refused a write a control node forwarded: that node may not send this command", "run the command on the node it concerns, or on the CA holder for certificate renewals; see docs/security.md"},

	AlreadyInitialised: {409, "this node is already part of a cluster", "use the existing cluster, or pass --force to discard it and create a new one"},
	NotInCluster:       {409, "this node has not joined a cluster yet", "run `meshctl init --cluster NAME` to create one or `meshctl join TOKEN` to join one"},
	NotControl:         {403, "this operation needs a control node", "run it on a control node"},
	NoLeader:           {503, "the cluster has no raft leader right now", "wait for an election to finish, or restore quorum by bringing control nodes back"},
	RaftApply:          {503, "the cluster could not commit the change", "retry; if it persists check that a quorum of control nodes is up"},
	NodeUnknown:        {404, "no node by that name", "check the name with `meshctl nodes`"},
	QuorumLoss:         {409, "the change would leave the control plane without quorum", "add or recover control nodes first"},
	SnapshotVersion:    {500, "the state snapshot has an unknown format version", "run a meshd version that knows this snapshot format"},
	CAHolderStays:      {409, "this node holds the cluster's CA keys: it cannot leave or be removed, and nothing (init or join, with --force or without) wipes its state dir", "move custody first: `meshctl ca handoff NODE` on this node (NODE an active control node), then leave, remove or re-initialise it; keep a sealed copy with `meshctl ca backup --out FILE --passphrase-file F`. On a node that is not the CA holder on record (`meshctl status`), ca/ is the copy of an unfinished handoff: run `meshctl ca handoff` on the holder again"},

	NotCAHolder:      {409, "this node does not hold the cluster's CA keys", "run the command on the CA holder: `meshctl status` on a control node names it"},
	CustodyTarget:    {409, "CA custody can only go to another active control node that is a raft voter", "pick a control node that `meshctl nodes` shows active with raft voter or leader"},
	CAProbeFailed:    {502, "the target did not prove that it holds working CA keys; custody did not move and the old holder keeps its keys", "check the target (`meshctl status` there, its log), then run the same `meshctl ca handoff NODE` again"},
	CAHolderAlive:    {409, "the recorded CA holder is alive (in gossip or raft); a restore would make a second holder", "move custody with `meshctl ca handoff NODE` on the holder; restore only once the holder is lost (failed in gossip and unreachable over raft)"},
	BackupPassphrase: {401, "the passphrase does not open this CA backup; nothing was changed", "use the passphrase file the backup was taken with"},
	BackupCorrupt:    {400, "the file is not a sealed meshd CA backup, or it is truncated or altered; nothing was changed", "use an intact copy of the file `meshctl ca backup --out` wrote"},
	CAOtherCluster:   {409, "the CA keys or the backup belong to another cluster (its cluster id or CA fingerprint differs); nothing was changed", "use this cluster's own backup or CA holder; `meshctl status` shows the cluster id"},
	CAPassphrase:     {400, "the passphrase file cannot be read, or holds fewer than 12 characters", "give --passphrase-file a readable file with a passphrase of at least 12 characters"},
	CAHolderChanged:  {409, "the CA holder on record changed while this custody move was prepared; nothing was changed", "check `meshctl status` for the holder now, then run the command again if it is still needed"},
	CABackupNoNext:   {409, "a CA rotation is in progress and the backup was taken before it began: it lacks the next CA's keys, without which the holder can neither sign in phase reissue nor finish the rotation; nothing was changed", "restore a backup taken after `meshctl ca rotate` began (`meshctl ca status` shows when); take one on the holder during every rotation"},

	MetricsAddrRefused: {400, "metrics_addr is neither a loopback address nor this node's overlay address, or it could not be bound", "set metrics_addr to 127.0.0.1:PORT or to this node's overlay IP (`meshctl status` shows it) and a free port, then restart meshd"},
	QuorumAtRisk:       {200, "a raft voter is unreachable: one more lost voter and the control plane loses its quorum", "bring the unreachable voter back (`meshctl nodes` shows it), or remove it with `meshctl remove NAME` while a quorum remains"},
	ControlBusy:        {429, "this control node has answered as many tunnel reports, node lists or strict changes this second as it takes from this caller, from its source network (an IPv4 /24, an IPv6 /64) or from every caller together (the message says which)", "nothing to do: a worker's report is sent again later, to the next control node, and a read asks the next control node; `meshctl nodes` on a worker can be asked again in a moment. A worker refused for its own bound calls far more often than meshd does: see what runs `meshctl nodes` in a loop on it"},
	NoLeaderWarning:    {200, "this control node sees no raft leader: the cluster cannot change (no admit, join or remove) until one is elected", "wait a few seconds for an election; if it persists, bring control nodes back until a majority of the voters runs"},

	DaemonStarting:    {503, "meshd is still starting", "wait a moment and run the command again"},
	DiskCheckFailed:   {507, "this node's state dir failed its write check (a page written, synced and removed every few seconds): the disk or filesystem is failing, read-only or out of inodes; raft and the identity live there", "look at the kernel log (`journalctl -k`) and `df -i`; a control node hands raft leadership to another voter and serves no joins until the check passes again"},
	ClockUntrusted:    {412, "this control node's clock differs from the median of the control nodes' clocks by more than max_clock_skew: it mints no token, serves no join and hands off raft leadership until its clock is fixed; nothing was changed", "synchronise this machine's clock (`timedatectl set-ntp true`, `chronyc makestep`); `meshctl status` on each control node shows the offsets; mint on another control node meanwhile"},
	ClockPeerSkewed:   {200, "another control node's clock differs from the median of the control nodes' clocks by more than max_clock_skew: it mints no token and serves no join until it is fixed", "synchronise that machine's clock (`timedatectl set-ntp true`, `chronyc makestep`)"},
	SeedUnfit:         {503, "this control node is not fit to serve joins now: its state dir fails a write check, or its clock is off from the other control nodes' (its `meshctl status` says which); nothing was recorded", "nothing to do for the join: it moves on to the token's next seed; on that control node, fix what its status names (free disk space, repair the disk, or synchronise the clock)"},
	DaemonStopping:    {503, "meshd is stopping (it was told to stop or restart); nothing was changed", "wait for it to start again (`systemctl status meshd`) and run the same command again"},
	DaemonUnreachable: {503, "meshd is not running or its socket cannot be reached", "start it (`systemctl start meshd`) and check `systemctl status meshd`, or pass --socket"},
	BadRequest:        {400, "the request is malformed", "check the command's usage with --help"},
	PermissionDenied:  {403, "this user may not do this: only root and members of the meshd group may connect to meshd or change it", "run as root (sudo), or add the user to the meshd group (`usermod -aG meshd USER`) and log in again so the new group takes effect"},
	UnknownCode:       {404, "no such code", "list the codes with `meshctl explain --list`, or read /usr/share/doc/meshd/errors.md (docs/errors.md in the source)"},
	Busy:              {409, "another init, join or leave is in progress on this node", "wait for it to finish"},
	AlreadyRunning:    {409, "another meshd is already running on this state dir or socket (the message names its PID)", "use the running meshd (`meshctl status`), or stop it first (`systemctl stop meshd`, or kill the PID named); two meshd must not share a state dir or a socket"},
	AmbiguousCode:     {400, "the text given to `meshctl explain` names more than one code", "give more of the code: the whole code, its mnemonic (TKNCNS) or its number (X401004); the detail lists the codes it matched, `meshctl explain --list` all of them"},
	ConsoleAddr:       {400, "the console's --addr is not a loopback address (127.0.0.0/8, ::1 or localhost) with a port, or it could not be bound", "run `meshctl ui` without --addr (a free port on 127.0.0.1), or give --addr 127.0.0.1:PORT with a free PORT; the console is never served beyond this machine"},
	ConsoleSecret:     {403, "the request carries neither the console's session cookie nor its one-time secret (a URL's secret works once: in the browser that opened it first)", "open the URL `meshctl ui` printed, in the browser you use for the console; if it was used already, stop `meshctl ui` and start it again for a new URL"},
	ConsoleCSRF:       {403, "the form was sent without this session's CSRF token, or with another one; nothing was changed", "reload the console's page and send the form again from it"},
	ConsoleOrigin:     {403, "the form was sent from another origin than the console's own (the Origin or Referer header names another site, or neither is present); nothing was changed", "use the console's own pages to change the cluster; a page of another site cannot"},
	ConsoleHost:       {403, "the request names another host than the address the console is bound to (the Host header differs: DNS rebinding, or a proxy)", "open the console at the exact address `meshctl ui` printed (the IP and port, not a host name)"},
	ConsoleForm:       {400, "a field of the console's form is missing or not valid (the detail names it)", "correct the field named in the detail and send the form again"},
	ConsolePage:       {404, "the console has no such page, or not for this method", "use the console's menu: Mesh, Admit, Tokens, Approvals, Audit"},
	PortInUse:         {409, "a port meshd must listen on is taken by another process", "stop what holds it (`ss -lntup` names it), or change the port in /etc/meshd/meshd.yaml (ports:) on every node"},

	KeyPermissions: {400, "a key file is readable or writable by group or others", "chmod 600 the file named in the message, or remove it and recreate the identity"},
	ConfigInvalid:  {400, "the configuration file is invalid", "fix every problem listed (each names its line, key and what is allowed) and check the file with `meshd check-config --config FILE`; a meshd that refused to start on it changed nothing"},
	StateDir:       {500, "the state directory could not be read or written", "check the path, its permissions (0700) and the free disk space"},
	StateCorrupt:   {500, "a file in the state directory is truncated or corrupt (the message names it); meshd did not start and changed nothing", "restore the named file from a backup and start meshd again. Never delete ca/ (the cluster's CA keys, on the CA holder only). If there is no backup and this is not the CA holder: run `meshctl remove NAME` on a control node, move this state dir aside, start meshd and join again with a fresh token"},
	DiskFull:       {507, "the filesystem holding the path named in the message is full (or a quota is reached); what was being written was not kept", "free space there (`df -h PATH` shows it) and run the same command again"},
	RestartNeeded:  {200, "the configuration change takes effect only after a restart", "restart meshd (`systemctl restart meshd`)"},

	GossipKey:           {401, "the gossip layer could not decrypt peers' messages with this node's key", "rejoin the node with a fresh token so it receives the cluster's gossip key"},
	GossipJoin:          {503, "no gossip peer could be reached", "gossip rides the overlay: check that Nebula reaches the control nodes (UDP 4242 on the underlay)"},
	OverlayApply:        {500, "the overlay configuration could not be applied; the running overlay is unchanged", "the message names the rejected setting (its meshd.yaml key, e.g. ports.nebula or tun_device) and why: fix it, or free what another process holds, and try again"},
	OverlayUnreach:      {504, "no lighthouse could be reached over the overlay", "check that UDP 4242 is open between the nodes"},
	OffloadRefused:      {200, "the kernel or the TUN device refused one or more of the overlay's offloads (TUN TSO/USO, UDP GRO/GSO): the overlay runs without them, one packet per system call, at more CPU per gigabyte; nothing else changes", "none needed for the overlay to work; for its speed run a newer kernel (USO needs Linux 6.2, TSO a TUN device with virtio headers, GSO a route whose device has TX checksum offload), or set overlay_offloads: false to stop the warning"},
	GossipContradicted:  {200, "gossip says a member failed or left, but this node's direct probe of the member's overlay address (through Nebula, answered only with that node's certificate) answered: the member is shown alive and is not counted down for anything (an ephemeral node is not removed)", "none needed once (a brief outage gossip saw first); if it repeats for a node that is up, a member's machine holding the gossip key forges gossip about it: nothing is decided on that gossip, but find the member (its overlay address sends the packets), remove it and run `meshctl keys rotate`"},
	GossipMemberIgnored: {200, "a gossip member has had no active record in raft, or tags (id, role, overlay IP) that disagree with its record, for 10 s (a joiner whose record is on its way is not warned about); it is ignored", "if it is a node of this cluster, check `meshctl nodes`; otherwise someone holds the gossip key: run `meshctl keys rotate` on a control node"},
	CARotationStalled:   {504, "a CA rotation cannot take its next step yet: some live member does not report the step, or something still depends on the old CA (the message names them)", "check the members or certificates named (`meshctl ca status`), then run `meshctl ca rotate` again; it resumes where it stopped"},
	KeyRotationStalled:  {504, "a gossip key rotation step was not reported done by every live member in time; the rotation stopped at that step", "check the members named in the message (`meshctl status` on them), then run `meshctl keys rotate` again"},
	RevocationPending:   {200, "the removal is recorded, but some members did not confirm within the bound that they block the removed node", "check the members listed as pending (are they up and reachable?); `meshctl nodes` shows when they acknowledge"},
	TunUnavailable:      {503, "the overlay's TUN device cannot be created (kernel mode)", "load the tun module (`modprobe tun`), run meshd with CAP_NET_ADMIN and /dev/net/tun (the packaged unit does), or set overlay_mode: userspace"},

	FirewallRule:                {400, "a firewall rule in meshd.yaml is invalid (port, proto, host, group, groups or cidr)", "fix the rule named in the message (see docs/operations.md, Overlay firewall); the running firewall was not changed"},
	BadGroup:                    {400, "the node group name is not valid or is reserved", "use 1-32 of a-z, 0-9 and '-', starting with a letter; control, worker and any are reserved (every certificate carries its role as a group)"},
	PingLost:                    {504, "no probe to the node was answered over the overlay", "check that the node runs (`meshctl nodes`), that UDP 4242 is open between the nodes, and that the node's firewall.inbound allows TCP to its gossip port from this node"},
	OverlayUDPBlocked:           {503, "no control node answered over UDP (STUN, ports.stun) while their TCP control port did: outbound UDP is blocked on this network, so the overlay cannot come up", "allow outbound UDP to the control nodes' Nebula port 4242 and STUN port 3478 (or the ports.nebula and ports.stun they use), or run from a network that does; `meshctl join --plan` checks it without spending the token"},
	NetcheckAnswered:            {100, "a control node answered the path check over UDP; the line shows the address it saw this node's packets come from", "none needed"},
	NetcheckNoAnswer:            {200, "a control node did not answer the path check over UDP while another did", "check that the control node runs and that UDP to its STUN port (ports.stun, 3478 by default) is open; the overlay still works through the control nodes that answered"},
	NetcheckPortPreserving:      {100, "the NAT in front of this node keeps its UDP source port (port-preserving): a direct path to nodes behind other NATs can be punched", "none needed"},
	NetcheckEndpointIndependent: {100, "the NAT in front of this node maps its UDP source port to one other port, the same towards every control node (endpoint-independent): a direct path can be punched", "none needed"},
	NetcheckSymmetric:           {200, "the NAT in front of this node maps its UDP source port to a different port towards each control node (symmetric): direct paths to nodes behind NATs cannot be punched, so that traffic is relayed", "none needed: a control node relays it; for direct paths, use a network whose NAT keeps ports (or forward ports.nebula to this node)"},
	NetcheckMappingUnknown:      {200, "fewer than two control nodes answered the path check, so the NAT's mapping could not be compared", "a cluster with two or more control nodes lets netcheck tell a symmetric NAT from others"},
	NetcheckDirect:              {100, "a direct path to other nodes is possible from here (UDP works and the NAT is not symmetric); what cannot go direct is relayed by the control node named", "none needed"},
	NetcheckRelayed:             {200, "no direct path to nodes behind NATs is possible from here; the control node named relays that traffic", "none needed; for direct paths see the symmetric NAT code's remedy"},
	NetcheckUnreachable:         {503, "no control node answered the path check, neither over UDP (STUN) nor on its TCP control port", "check that the control nodes run and are reachable from here (`meshctl nodes` on one of them); then run the check again"},
	NetcheckNotServed:           {200, "the path check could not be made against a control node: its control port answered (pinned, clock in bound) but it does not say it serves STUN on the port asked (a release without the STUN responder, or another ports.stun), so its silence over UDP proves nothing; a join goes on", "none needed: the join's confirmation shows whether the overlay comes up; upgrade the control nodes (or use the cluster's ports.stun) to have the path checked"},
	NetcheckSlow:                {200, "no control node answered over UDP within the check's first 2 s while its TCP port did, and one answered in the second try: UDP works, a control node was slow (busy)", "none needed: the join goes on; if it repeats, look at the control nodes' load"},
	DNSNotServed:                {200, "this node does not answer the cluster's names on an address it should (dns.loopback or its overlay address): the port is taken by another server, or meshd may not bind it; the rest of meshd runs", "free the address's port (dns.port, 53 by default: `ss -lunp 'sport = 53'`), or give meshd CAP_NET_BIND_SERVICE (the packaged unit does), or set dns.loopback/dns.port to a free one, then restart meshd"},
	ResolvedNotUsed:             {200, "systemd-resolved does not route the cluster's domain to this node's DNS: it is not running here, refused meshd's request, or serves another network namespace; the host resolves every other name as before", "without resolved, point a resolver at dns.loopback (`meshctl status` says where), e.g. a dnsmasq `server=/CLUSTER.mesh/127.0.77.53`; meshd never rewrites /etc/resolv.conf. With resolved, see the reason in `meshctl status`: \"refused\" for access means polkitd is missing (the packages recommend it and ship the rule /usr/share/polkit-1/rules.d/50-meshd.rules that lets user meshd set the overlay link's DNS)"},
	NetcheckNoNAT:               {100, "the control nodes see this node's own address and port: no NAT between them", "none needed"},
	HostRouteApply:              {500, "the kernel refused meshd's change to this host's forwarding, masquerade (nftables table ip meshd) or exit-node routes and rules; the message names the interface, prefix or rule and the kernel's error", "check that meshd runs with CAP_NET_ADMIN (the packaged unit gives it), that the kernel has nftables NAT (modules nf_tables and nft_masq) and that the interface named exists and is up; meshd applies the whole change again the next time it sets routes up, or at restart"},
	HostRouteInvalid:            {400, "a subnet route or exit node cannot be set up on this host: a prefix is not IPv4, has no route here or routes back into the overlay's own TUN device, there is no default route to carry 0.0.0.0/0, or the exit's table, mark or rule priorities are out of range (the message names which)", "carry only IPv4 prefixes this host reaches through an interface other than the overlay (`ip route get ADDRESS` shows the way), give an exit node a default route in its main table, and keep meshd's exit rule priorities below 32766 (the main table's rule)"},

	PairUnreachable: {200, "this node cannot reach a member over the overlay by its own probes, though gossip may show it alive (other members probe it on this node's behalf): a one-way or pair-wise break", "check the path between the two nodes' underlay addresses in both directions (UDP to the Nebula port, 4242 by default; firewalls, routes, NAT); `meshctl ping NAME` probes it, `meshctl nodes` marks the broken pairs"},

	Internal: {500, "meshd hit an internal error", "see the meshd log (`journalctl -u meshd`) and report it"},

	EventClusterCreated:   {100, "a cluster was created", "none needed"},
	EventTokenMinted:      {100, "a join token was minted", "none needed"},
	EventNodeAdmitted:     {100, "a node was admitted and recorded", "none needed"},
	EventNodeActive:       {100, "a node is active", "none needed"},
	EventNodeLeft:         {100, "a node left the cluster", "none needed"},
	EventNodeRemoved:      {100, "a node was removed and its certificates revoked", "none needed"},
	EventCertRenewed:      {100, "a node's Nebula host certificate was renewed", "none needed"},
	EventAdmissionAborted: {100, "an admission was undone before its certificates were recorded; its token is unused again", "none needed"},
	EventKeysRotated:      {100, "a step of a gossip key rotation was recorded", "none needed"},
	EventTLSRenewed:       {100, "a node's TLS leaf was renewed", "none needed"},
	EventRevocationAcks:   {100, "members' acknowledgements of a removal's revocation were recorded", "none needed"},
	EventTokensPruned:     {100, "join token records that ended (used, revoked or expired) before the retention cut-off were pruned", "none needed"},
	EventCertsRecorded:    {100, "a joining node's certificates were recorded; it is active once it confirms its join", "none needed"},
	EventCAHandedOff:      {100, "CA custody moved to another control node", "none needed"},
	EventCARestored:       {100, "CA custody was restored from a sealed backup onto a control node", "none needed"},
	EventCABackedUp:       {100, "a sealed backup of the CA was taken", "none needed"},
	EventCARotated:        {100, "a step of a CA rotation was recorded (begin, reissue or finish)", "none needed"},
	EventJoinFailed:       {100, "a join did not confirm within its bound; the node is failed and its certificates revoked", "run `meshctl admit NAME` and join again (its node id and overlay IP are kept)"},

	ApprovalWrongCode:      {403, "the approval code matches no join that waits with this token; wrong codes burn the token after 5", "read the 6-digit code off the joining machine's `meshctl join` output and run `meshctl approve NAME CODE` again; a code the joiner did not show may be someone else's join with a leaked token"},
	ApprovalBurnt:          {403, "the join token was burnt (five wrong approval codes, or more than 16 joins waited with it); nobody can join with it", "assume the token leaked: mint a new one with `meshctl admit NAME --approve`, check `meshctl audit` for where the joins came from, and approve only the code the machine you admit shows"},
	ApprovalTimeout:        {408, "no operator approved the join before its token expired", "mint a new token with `meshctl admit NAME --approve` and, while the join waits, run `meshctl approve NAME CODE` on a control node with the code the joiner shows"},
	ApprovalNotPending:     {409, "no join of that name waits for approval", "start the join first (`meshctl join` with a token minted by `meshctl admit NAME --approve`); `meshctl tokens` shows which tokens wait"},
	EventApprovalRequested: {100, "a join with a token minted with --approve waits for an operator's approval", "run `meshctl approve NAME CODE` on a control node with the code the joining machine shows"},
	EventJoinApproved:      {100, "an operator approved a waiting join", "none needed"},
	EventApprovalWrong:     {100, "an operator typed an approval code that matches no waiting join", "none needed"},

	ReloadRefused:   {400, "the config file meshd was asked to reload is invalid; meshd keeps running with the config it had and changed nothing", "fix every problem listed (each names its line, key and what is allowed), check with `meshd check-config`, then run `meshctl reload` (or `systemctl reload meshd`) again"},
	VersionMismatch: {200, "meshctl and the meshd it talks to are different builds (version or commit)", "upgrade the older one so both are the same release (`meshctl version` shows both); a mixed pair works for what both know, but a newer meshctl may ask for what an older meshd lacks"},
}
