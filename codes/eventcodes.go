package codes

// Approval of a join (`meshctl admit --approve`, `meshctl approve`).
const (
	ApprovalWrongCode      Code = "X403040APRWRG"
	ApprovalBurnt          Code = "X403041APRBRN"
	ApprovalTimeout        Code = "X408042APRTMO"
	ApprovalNotPending     Code = "X409043APRNON"
	EventApprovalRequested Code = "X100640APRREQ"
	EventJoinApproved      Code = "X100641APROKD"
	EventApprovalWrong     Code = "X100642APRBAD"
)

// The operator's tools (issue 14): version and config check.
const (
	// VersionMismatch: `meshctl version` found the daemon a different
	// build from the client (a warning).
	VersionMismatch Code = "X200320VERMIS"
	// ReloadRefused: a reload found the config file invalid (every
	// problem listed); the running meshd keeps the config it had.
	ReloadRefused Code = "X400410RLDBAD"
)

// Event codes (1xx): what happened, for the audit ring and the event stream.
const (
	EventClusterCreated   Code = "X100601CLINIT"
	EventTokenMinted      Code = "X100602TKMINT"
	EventNodeAdmitted     Code = "X100603NDADMT"
	EventNodeActive       Code = "X100604NDACTV"
	EventNodeLeft         Code = "X100605NDLEFT"
	EventNodeRemoved      Code = "X100606NDRMVD"
	EventCertRenewed      Code = "X100607CRTRNW"
	EventAdmissionAborted Code = "X100608ADMABT"
	EventKeysRotated      Code = "X100609GSPROT"
	EventTLSRenewed       Code = "X100610TLSRNW"
	EventRevocationAcks   Code = "X100611RVKACK"
	EventTokensPruned     Code = "X100612TKPRUN"
	EventCertsRecorded    Code = "X100620CRTREC"
	EventJoinFailed       Code = "X100621JNFAIL"
	EventCAHandedOff      Code = "X100650CAHAND"
	EventCARestored       Code = "X100651CARSTR"
	EventCABackedUp       Code = "X100652CABKUP"
	EventCARotated        Code = "X100631CAROTN"
)
