package enroll

// MaxResponseBody exposes the client's response size limit to the external
// tests.
const MaxResponseBody = maxResponseBody
