package protocol

// CodeSignatureInvalid is the error text an agent acknowledges a config with when its statement is
// missing, not signed by a trusted key, or does not match the config (type, version, content or scope).
const CodeSignatureInvalid = "signature_invalid"

// Signed is a statement signed by the config authority (the resolver): the exact RFC 8785 canonical
// JSON bytes of the statement (base64 on the wire, so no re-encoding on the way can change them), the
// id of the key that signed them, and the ed25519 signature over those bytes. libs/agentconfig/signing
// builds and verifies statements; everything between the resolver and the agent only carries them.
type Signed struct {
	Statement []byte `json:"statement"`
	KeyID     string `json:"key_id"`
	Signature []byte `json:"signature"`
}
