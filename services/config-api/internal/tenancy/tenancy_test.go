package tenancy

import (
	"testing"

	"github.com/google/uuid"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine started by them is still running at the end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestZeroPrincipalIsNoOne: the zero value (what a public route holds) is not an admin, can access no
// client, and its filter matches no client — while an explicit admin sees everything.
func TestZeroPrincipalIsNoOne(t *testing.T) {
	client := uuid.New()
	var zero Principal
	if zero.Admin() {
		t.Fatal("zero principal is an admin")
	}
	if zero.RequireAdmin() == nil {
		t.Fatal("zero principal passed RequireAdmin")
	}
	if zero.CanAccess(client) || zero.CanAccess(uuid.Nil) {
		t.Fatal("zero principal can access a client")
	}
	if f := zero.Filter(); !f.Valid || f.UUID != uuid.Nil {
		t.Fatalf("zero principal filter = %+v, want a filter matching no client", f)
	}

	admin := Principal{IsAdmin: true}
	if !admin.Admin() || admin.RequireAdmin() != nil || !admin.CanAccess(client) || admin.Filter().Valid {
		t.Fatalf("explicit admin is not an unfiltered admin: %+v", admin)
	}

	scoped := Principal{ClientID: uuid.NullUUID{UUID: client, Valid: true}}
	if scoped.Admin() || !scoped.CanAccess(client) || scoped.CanAccess(uuid.New()) || scoped.Filter().UUID != client {
		t.Fatalf("client principal misbehaves: %+v", scoped)
	}
	// A client-bound token never counts as admin, even with the flag set by mistake.
	confused := Principal{ClientID: scoped.ClientID, IsAdmin: true}
	if confused.Admin() || confused.Filter().UUID != client {
		t.Fatalf("client principal with IsAdmin set is treated as admin: %+v", confused)
	}
}
