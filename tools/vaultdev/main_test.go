package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/vault/api"
)

// childEnv makes the test binary act as the vaultdev command, so the process contract (ready
// line on stdout, clean exit on SIGTERM) is tested without a separate go build.
const childEnv = "VAULTDEV_TEST_RUN_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func startTestVault(t *testing.T, opts options) *devVault {
	t.Helper()
	logger := hclog.New(&hclog.LoggerOptions{Name: "vaultdev", Level: hclog.Error, Output: os.Stderr})
	dev, err := startDevVault(t.Context(), opts, logger)
	if err != nil {
		t.Fatalf("start dev vault: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := dev.close(ctx); err != nil {
			t.Errorf("close dev vault: %v", err)
		}
	})
	return dev
}

func testOptions() options {
	return options{
		addr:        "127.0.0.1:0",
		transitKey:  "configsync",
		appRole:     true,
		tokenTTL:    20 * time.Second,
		tokenMaxTTL: 10 * time.Minute,
	}
}

func testClient(t *testing.T, dev *devVault, token string) *api.Client {
	t.Helper()
	client, err := dev.client(token)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// batchEncrypt encrypts plaintexts with one batch_input request and returns the ciphertexts.
func batchEncrypt(ctx context.Context, client *api.Client, key string, plaintexts []string) ([]string, error) {
	input := make([]map[string]interface{}, len(plaintexts))
	for i, p := range plaintexts {
		input[i] = map[string]interface{}{"plaintext": base64.StdEncoding.EncodeToString([]byte(p))}
	}
	secret, err := client.Logical().WriteWithContext(ctx, "transit/encrypt/"+key, map[string]interface{}{"batch_input": input})
	if err != nil {
		return nil, err
	}
	return batchResults(secret, "ciphertext", len(plaintexts))
}

// batchDecrypt decrypts ciphertexts with one batch_input request and returns the plaintexts.
func batchDecrypt(ctx context.Context, client *api.Client, key string, ciphertexts []string) ([]string, error) {
	input := make([]map[string]interface{}, len(ciphertexts))
	for i, c := range ciphertexts {
		input[i] = map[string]interface{}{"ciphertext": c}
	}
	secret, err := client.Logical().WriteWithContext(ctx, "transit/decrypt/"+key, map[string]interface{}{"batch_input": input})
	if err != nil {
		return nil, err
	}
	encoded, err := batchResults(secret, "plaintext", len(ciphertexts))
	if err != nil {
		return nil, err
	}
	plaintexts := make([]string, len(encoded))
	for i, e := range encoded {
		p, err := base64.StdEncoding.DecodeString(e)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		plaintexts[i] = string(p)
	}
	return plaintexts, nil
}

func batchResults(secret *api.Secret, field string, want int) ([]string, error) {
	if secret == nil {
		return nil, errors.New("empty response")
	}
	items, ok := secret.Data["batch_results"].([]interface{})
	if !ok || len(items) != want {
		return nil, fmt.Errorf("batch_results: got %#v, want %d items", secret.Data["batch_results"], want)
	}
	out := make([]string, len(items))
	for i, item := range items {
		m, _ := item.(map[string]interface{})
		if e, _ := m["error"].(string); e != "" {
			return nil, fmt.Errorf("item %d: %s", i, e)
		}
		if out[i], ok = m[field].(string); !ok {
			return nil, fmt.Errorf("item %d: no %s in %#v", i, field, m)
		}
	}
	return out, nil
}

func assertEqualStrings(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestTransitBatchRoundTripSurvivesRotation(t *testing.T) {
	dev := startTestVault(t, testOptions())
	client := testClient(t, dev, dev.info.Token)
	ctx := t.Context()
	plaintexts := []string{"db-password", "", "api-key-\x00-binary"}

	oldCiphertexts, err := batchEncrypt(ctx, client, "configsync", plaintexts)
	if err != nil {
		t.Fatalf("encrypt: %v", err)
	}
	for _, c := range oldCiphertexts {
		if !strings.HasPrefix(c, "vault:v1:") {
			t.Fatalf("ciphertext %q: want key version 1", c)
		}
	}
	got, err := batchDecrypt(ctx, client, "configsync", oldCiphertexts)
	if err != nil {
		t.Fatalf("decrypt: %v", err)
	}
	assertEqualStrings(t, got, plaintexts)

	if _, err := client.Logical().WriteWithContext(ctx, "transit/keys/configsync/rotate", nil); err != nil {
		t.Fatalf("rotate: %v", err)
	}
	newCiphertexts, err := batchEncrypt(ctx, client, "configsync", plaintexts)
	if err != nil {
		t.Fatalf("encrypt after rotate: %v", err)
	}
	if !strings.HasPrefix(newCiphertexts[0], "vault:v2:") {
		t.Fatalf("ciphertext %q after rotate: want key version 2", newCiphertexts[0])
	}
	got, err = batchDecrypt(ctx, client, "configsync", append(oldCiphertexts, newCiphertexts...))
	if err != nil {
		t.Fatalf("decrypt old and new ciphertexts after rotate: %v", err)
	}
	assertEqualStrings(t, got, append(plaintexts, plaintexts...))
}

func TestAppRoleTokenIsLimitedToTransitKey(t *testing.T) {
	opts := testOptions()
	dev := startTestVault(t, opts)
	ctx := t.Context()
	if dev.info.RoleID == "" || dev.info.SecretID == "" {
		t.Fatalf("ready info %+v: want role_id and secret_id", dev.info)
	}

	login, err := testClient(t, dev, "").Logical().WriteWithContext(ctx, "auth/approle/login", map[string]interface{}{
		"role_id":   dev.info.RoleID,
		"secret_id": dev.info.SecretID,
	})
	if err != nil {
		t.Fatalf("approle login: %v", err)
	}
	if login.Auth == nil || !login.Auth.Renewable || login.Auth.LeaseDuration != int(opts.tokenTTL.Seconds()) {
		t.Fatalf("login auth %+v: want a renewable token with ttl %s", login.Auth, opts.tokenTTL)
	}
	client := testClient(t, dev, login.Auth.ClientToken)

	renewed, err := client.Auth().Token().RenewSelfWithContext(ctx, 0)
	if err != nil {
		t.Fatalf("renew self: %v", err)
	}
	if renewed.Auth == nil || renewed.Auth.LeaseDuration <= 0 {
		t.Fatalf("renew auth %+v: want a positive ttl", renewed.Auth)
	}
	ciphertexts, err := batchEncrypt(ctx, client, "configsync", []string{"secret"})
	if err != nil {
		t.Fatalf("encrypt as approle: %v", err)
	}
	if _, err := batchDecrypt(ctx, client, "configsync", ciphertexts); err != nil {
		t.Fatalf("decrypt as approle: %v", err)
	}
	if _, err := client.Logical().WriteWithContext(ctx, "transit/keys/configsync/rotate", nil); err != nil {
		t.Fatalf("rotate as approle: %v", err)
	}
	key, err := client.Logical().ReadWithContext(ctx, "transit/keys/configsync")
	if err != nil {
		t.Fatalf("read key as approle: %v", err)
	}
	if v, _ := key.Data["latest_version"].(json.Number); v.String() != "2" {
		t.Fatalf("latest_version %v: want 2", key.Data["latest_version"])
	}

	denied := []struct {
		name string
		call func() error
	}{
		{"other transit key", func() error {
			_, err := batchEncrypt(ctx, client, "other", []string{"secret"})
			return err
		}},
		{"key config", func() error {
			_, err := client.Logical().WriteWithContext(ctx, "transit/keys/configsync/config", map[string]interface{}{"deletion_allowed": true})
			return err
		}},
		{"mounts", func() error {
			_, err := client.Sys().ListMountsWithContext(ctx)
			return err
		}},
	}
	for _, d := range denied {
		var respErr *api.ResponseError
		if err := d.call(); !errors.As(err, &respErr) || respErr.StatusCode != 403 {
			t.Errorf("%s: got %v, want 403 permission denied", d.name, err)
		}
	}
}

func TestCommandPrintsReadyLineAndExitsOnSIGTERM(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-approle", "-transit-key", "configsync")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	reader := bufio.NewReader(stdout)
	line, err := reader.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read ready line: %v", err)
	}
	var info readyInfo
	if err := json.Unmarshal(line, &info); err != nil {
		t.Fatalf("ready line %q: %v", line, err)
	}
	if !strings.HasPrefix(info.Addr, "http://127.0.0.1:") || info.Token == "" || info.RoleID == "" || info.SecretID == "" {
		t.Fatalf("ready line %q: want addr on 127.0.0.1, token, role_id and secret_id", line)
	}

	cfg := api.DefaultConfig()
	cfg.Address = info.Addr
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client.SetToken(info.Token)
	if _, err := batchEncrypt(t.Context(), client, "configsync", []string{"secret"}); err != nil {
		t.Fatalf("encrypt against child: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(reader)
	if err != nil {
		t.Fatalf("read stdout after ready line: %v", err)
	}
	if len(rest) != 0 {
		t.Errorf("stdout after ready line: %q, want nothing", rest)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0", err)
	}
}
