package webui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// signinCookie holds the sign-in form's anti-forgery token (double submit): before a session exists,
// it is what ties the form post to a form this console served.
const signinCookie = "configsync_signin"

type signInData struct {
	Next    string
	Token   string // the form's anti-forgery token
	Message string
}

func (c *Console) signInForm(w http.ResponseWriter, r *http.Request) {
	c.showSignIn(w, r, http.StatusOK, nextPath(r.URL.Query().Get("next")), "")
}

func (c *Console) showSignIn(w http.ResponseWriter, r *http.Request, status int, next, msg string) {
	var b [24]byte
	_, _ = rand.Read(b[:])
	token := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{
		Name: signinCookie, Value: token, Path: Prefix + "/signin", MaxAge: 3600,
		HttpOnly: true, Secure: c.isSecure(r), SameSite: http.SameSiteStrictMode,
	})
	c.render(w, status, "signin", nil, "Sign in", signInData{Next: next, Token: token, Message: msg})
}

// signIn exchanges an API token for a session cookie.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(r); err != nil {
		c.showSignIn(w, r, http.StatusBadRequest, Prefix+"/", message(err))
		return
	}
	next := nextPath(r.PostForm.Get("next"))
	ck, err := r.Cookie(signinCookie)
	formToken := r.PostForm.Get("csrf")
	if !c.sameOrigin(r) || err != nil || formToken == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(formToken)) != 1 {
		c.showSignIn(w, r, http.StatusForbidden, next, errCSRF.Error())
		return
	}
	s, err := c.svc.Sessions.SignIn(r.Context(), strings.TrimSpace(r.PostForm.Get("token")))
	if fault.Is(err, fault.Unauthenticated) {
		c.showSignIn(w, r, http.StatusUnauthorized, next, "That token is not valid (or has been revoked).")
		return
	}
	if err != nil {
		c.log.Error("console sign-in failed", zap.Error(err))
		c.showSignIn(w, r, statusOf(err), next, message(err))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: signinCookie, Path: Prefix + "/signin", MaxAge: -1, HttpOnly: true, Secure: c.isSecure(r), SameSite: http.SameSiteStrictMode})
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.ID, Path: Prefix + "/", Expires: s.ExpiresAt,
		MaxAge: int(c.svc.Sessions.TTL().Seconds()), HttpOnly: true, Secure: c.isSecure(r), SameSite: http.SameSiteStrictMode,
	})
	c.log.Info("console signed in", zap.Stringer("token_id", s.Principal.TokenID))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signOut ends the session and clears the cookie.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, req *request) error {
	if err := c.svc.Sessions.SignOut(r.Context(), req.session.ID); err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: Prefix + "/", MaxAge: -1, HttpOnly: true, Secure: c.isSecure(r), SameSite: http.SameSiteStrictMode})
	if req.htmx {
		w.Header().Set("HX-Redirect", Prefix+"/signin")
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	http.Redirect(w, r, Prefix+"/signin", http.StatusSeeOther)
	return nil
}
