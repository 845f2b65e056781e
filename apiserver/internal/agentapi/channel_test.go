package agentapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
	"github.com/svc-dev/svc/shared/wire"
)

func TestChannelConfigForTheProjectsRuntimeOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	secret := []byte("runtime-auth-secret")
	ps := storetest.Projects(t, st, "one", "two")
	p1, p2 := ps[0], ps[1]

	srv := servertest.New(t, server.Deps{Store: st, RuntimeSecret: secret})

	get := func(project, token string) (int, wire.ChannelConfig, string) {
		res, b := testhttp.Get(t, srv.URL+"/internal/projects/"+project+"/channel", token)
		var cfg wire.ChannelConfig
		_ = json.Unmarshal(b, &cfg)
		return res.StatusCode, cfg, string(b)
	}

	// No channel yet: empty secret (the pod rejects everything).
	if st, cfg, body := get(p1.ID, runtimetoken.Mint(secret, p1.ID)); st != 200 || cfg.Configured || cfg.Secret != "" {
		t.Fatalf("unconfigured: %d %s", st, body)
	}
	sec, hdrs := "s3cret", `{"X-Tenant":"acme","X-Num":7,"bad name":"x","X-Null":null,"X-Obj":{"a":1}}`
	ch, err := st.SetChannel(ctx, p1.ID, &sec, &hdrs)
	if err != nil {
		t.Fatal(err)
	}
	status, cfg, body := get(p1.ID, runtimetoken.Mint(secret, p1.ID))
	if status != 200 || !cfg.Configured || cfg.ChannelID != ch.ID || cfg.Secret != "s3cret" {
		t.Fatalf("configured: %d %s", status, body)
	}
	want := map[string]string{"X-Tenant": "acme", "X-Num": "7", "X-Obj": `{"a":1}`}
	if len(cfg.CallbackHeaders) != len(want) {
		t.Fatalf("headers = %v", cfg.CallbackHeaders)
	}
	for k, v := range want {
		if cfg.CallbackHeaders[k] != v {
			t.Fatalf("headers = %v", cfg.CallbackHeaders)
		}
	}

	if len(cfg.PreviousSecrets) != 0 || len(cfg.FailingEndpoints) != 0 {
		t.Fatalf("a fresh channel has no previous secret or failing endpoint: %s", body)
	}

	// A rotation's overlap and a failing endpoint reach the pod.
	if _, err := st.RotateChannelSecret(ctx, p1.ID, "n3w-secret", time.Hour); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-2 * time.Hour)
	var fails []store.WebhookAttempt
	for i := range 2 {
		fails = append(fails, store.WebhookAttempt{ID: store.NewID("att"), ProjectID: p1.ID, ChannelID: ch.ID, CorrelationID: "c",
			WebhookID: "msg_c", Kind: wire.AttemptDelivery, Attempt: i + 1, URL: "https://h.example/cb", Endpoint: "https://h.example/cb",
			AttemptedAt: t0.Add(time.Duration(i) * time.Hour), StatusCode: 500, Outcome: wire.AttemptFailed})
	}
	if _, _, err := st.RecordWebhookAttempts(ctx, fails, time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	status, cfg, body = get(p1.ID, runtimetoken.Mint(secret, p1.ID))
	if status != 200 || cfg.Secret != "n3w-secret" || len(cfg.PreviousSecrets) != 1 || cfg.PreviousSecrets[0] != "s3cret" ||
		len(cfg.FailingEndpoints) != 1 || cfg.FailingEndpoints[0] != "https://h.example/cb" {
		t.Fatalf("after a rotation and a failing endpoint: %d %s", status, body)
	}
	if cfg.SigningKey != "" {
		t.Fatalf("a channel without a signing key: %s", body)
	}
	// The ed25519 signing key reaches the pod.
	sk, err := wire.NewWebhookSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetChannelSigningKey(ctx, p1.ID, sk); err != nil {
		t.Fatal(err)
	}
	if status, cfg, body = get(p1.ID, runtimetoken.Mint(secret, p1.ID)); status != 200 || cfg.SigningKey != sk {
		t.Fatalf("signing key: %d %s", status, body)
	}
	if _, err := st.SetChannelSigningKey(ctx, p2.ID, sk); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a signing key for a project without a channel: %v", err)
	}

	// Another project's token, no token, a bad token: refused.
	for _, tok := range []string{runtimetoken.Mint(secret, p2.ID), "", "garbage"} {
		if st, _, body := get(p1.ID, tok); st != 401 {
			t.Fatalf("token %q: %d %s", tok, st, body)
		}
	}
}
