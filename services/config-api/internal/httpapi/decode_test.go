package httpapi

import "testing"

// A JSON null is not an empty request: rotate with body null must not mean "re-encrypt only".
func TestDecodeBytesRejectsNull(t *testing.T) {
	var req struct {
		Secret map[string]string `json:"secret"`
	}
	for _, body := range []string{"null", " null\n"} {
		if err := decodeBytes([]byte(body), &req); err == nil {
			t.Errorf("body %q accepted", body)
		}
	}
	if err := decodeBytes([]byte(`{"secret":{"password":"x"}}`), &req); err != nil || req.Secret["password"] != "x" {
		t.Fatalf("object body: %v %+v", err, req)
	}
}
