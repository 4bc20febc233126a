package natsrpc

import (
	"strings"
	"unicode/utf8"
)

// MaxHeaderValue is the most bytes HeaderValue keeps.
const MaxHeaderValue = 512

// HeaderValue makes s usable as a NATS header value: one line (CR and LF become spaces, invalid UTF-8
// is replaced), at most MaxHeaderValue bytes cut on a character boundary, never empty.
func HeaderValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) > MaxHeaderValue {
		cut := MaxHeaderValue
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	if strings.TrimSpace(s) == "" {
		return "error"
	}
	return s
}
