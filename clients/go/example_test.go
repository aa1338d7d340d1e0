package tokend_test

// Compiled (not run) examples, as in README.md.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"golang.org/x/oauth2"

	"tokend.io/tokend"
)

func ExampleClient_Token() {
	ctx := context.Background()
	client := tokend.NewClient() // $TOKEND_SOCKET, else /run/tokend/io.tokend
	defer client.Close()
	credentials, err := client.Token(ctx, "alice", time.Minute, "")
	var reauth *tokend.ReauthenticationRequiredError
	switch {
	case errors.As(err, &reauth):
		log.Fatalf("alice must log in again: %s", reauth.Reason)
	case errors.Is(err, tokend.ErrDaemonUnavailable):
		log.Fatal(err) // names the socket
	case err != nil:
		log.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.example/resource", nil)
	req.Header.Set("Authorization", credentials.AuthorizationHeader())
}

func ExampleTokenSource() {
	ctx := context.Background()
	httpClient := oauth2.NewClient(ctx, tokend.TokenSource("alice", tokend.WithMinValid(time.Minute)))
	resp, err := httpClient.Get("https://api.example/resource")
	if err != nil {
		log.Fatal(err) // tokend's typed errors come wrapped in a *url.Error
	}
	resp.Body.Close()
}

func ExampleNewTransport() {
	httpClient := &http.Client{Transport: tokend.NewTransport("alice"), Timeout: 30 * time.Second}
	resp, err := httpClient.Get("https://api.example/resource") // a 401 is retried once with a new token
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}

func ExampleClient_NarrowedToken() {
	ctx := context.Background()
	client := tokend.NewClient()
	defer client.Close()
	// A token for one API with part of alice's scope (her provider has narrowed_tokens = true).
	credentials, err := client.NarrowedToken(ctx, "alice", time.Minute, "",
		tokend.WithScope("read"), tokend.WithResource("https://api.example/"))
	var invalid *tokend.InvalidCredentialError
	switch {
	case errors.As(err, &invalid):
		log.Fatalf("no such narrowed token for alice: %s", invalid.Reason) // a scope she lacks, or narrowed_tokens is off
	case err != nil:
		log.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.example/resource", nil)
	req.Header.Set("Authorization", credentials.AuthorizationHeader()) // credentials.Scope is "read"
}

func ExampleWithScope() {
	ctx := context.Background()
	// The same narrowed token through oauth2 and through a Transport (which replaces it on a 401).
	source := tokend.TokenSource("alice", tokend.WithScope("read"), tokend.WithResource("https://api.example/"))
	viaOAuth2 := oauth2.NewClient(ctx, source)
	viaTransport := &http.Client{Transport: tokend.NewTransport("alice", tokend.WithScope("read"), tokend.WithResource("https://api.example/"))}
	for _, httpClient := range []*http.Client{viaOAuth2, viaTransport} {
		resp, err := httpClient.Get("https://api.example/resource")
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
}

func ExampleClient_DPoPProof() {
	ctx := context.Background()
	client := tokend.NewClient()
	defer client.Close()
	req, _ := http.NewRequest(http.MethodGet, "https://api.example/resource", nil)
	proof, err := client.DPoPProof(ctx, "alice", req.Method, req.URL.String())
	if err != nil {
		log.Fatal(err) // *InvalidCredentialError when alice's tokens are not DPoP-bound
	}
	proof.SetHeaders(req) // Authorization: DPoP <token>, DPoP: <proof>; one proof per request
}

func ExampleNewDPoPTransport() {
	httpClient := &http.Client{Transport: tokend.NewDPoPTransport("alice"), Timeout: 30 * time.Second}
	resp, err := httpClient.Get("https://api.example/resource") // a proof per request; a use_dpop_nonce 401 is retried once
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}

func ExampleClient_Watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := tokend.NewClient().Watch(ctx, "alice")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for {
		credentials, err := w.Next()
		if err != nil {
			log.Printf("watch ended: %v", err)
			return
		}
		fmt.Println("new token, expires at", credentials.ExpiresAt)
	}
}
