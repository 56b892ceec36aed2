package pki

// MaxKeyFile exposes the key file size bound to the external tests.
const MaxKeyFile = maxKeyFile
