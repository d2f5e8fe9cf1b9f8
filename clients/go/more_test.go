package leasehold_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// A wait longer than the broker's --max-wait is a chain of calls that keep
// their place: the caller who came later stays behind.
func TestAWaitLongerThanTheBrokersMaxWait(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--max-wait", "1s")
	a, first, second := dial(t, b.addr), dial(t, b.addr), dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	// A broker from before structured refusals says its --max-wait in
	// words only, which the client does not parse.
	_, err := a.Acquire(ctx, name, leasehold.WithWait(0), leasehold.WithTTL(2*time.Hour))
	var e *leasehold.Error
	if errors.As(err, &e) && e.Reason == "" {
		t.Skip("the broker sends no structured refusals (no max_wait_ms to learn its --max-wait from)")
	}
	held, err := a.Acquire(ctx, name, leasehold.WithTTL(10*time.Second), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	waiter := func(c *leasehold.Client, who string) {
		l, err := c.Acquire(ctx, name, leasehold.WithWait(8*time.Second))
		if err != nil {
			t.Error(who, err)
			order <- who + " failed"
			return
		}
		order <- who
		_ = l.Release(ctx)
	}
	go waiter(first, "first")
	waitFor(t, func() bool { d, _ := a.Describe(ctx, name); return d.Waiters == 1 }, "the first waiter in line")
	go waiter(second, "second")
	waitFor(t, func() bool { d, _ := a.Describe(ctx, name); return d.Waiters == 2 }, "the second waiter in line")
	// Past two of the broker's maximum waits: both chained their calls.
	time.Sleep(2500 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-order; got != "first" {
		t.Fatalf("%s got the lock first", got)
	}
	if got := <-order; got != "second" {
		t.Fatalf("then %s", got)
	}
}

// A broker's graceful shutdown ends a waiting Acquire, keeping its place:
// the wait goes on, on the next replica.
func TestAWaitMovesOnWhenItsBrokerShutsDown(t *testing.T) {
	t.Parallel()
	store := startRedis(t)
	b1 := startBroker(t, "--store", store)
	b2 := startBroker(t, "--store", store)
	holder, waiter := dial(t, b2.addr), dial(t, b1.addr+","+b2.addr)
	ctx, name := bg(t), lockName(t)
	held, err := holder.Acquire(ctx, name, leasehold.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *leasehold.Lease, 1)
	endless, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		l, err := waiter.Acquire(endless, name) // no deadline: each call keeps its place
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, func() bool { d, _ := holder.Describe(ctx, name); return d.Waiters == 1 }, "the waiter in line")
	_ = b1.cmd.Process.Signal(syscall.SIGTERM)
	within(t, b1.done, 20*time.Second, "b1's shutdown")
	waitFor(t, func() bool { return waiter.Target() == b2.addr }, "the waiter on b2")
	waitFor(t, func() bool { d, _ := holder.Describe(ctx, name); return d.Waiters == 1 }, "the waiter in line on b2")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Fence() <= held.Fence() {
		t.Fatalf("fence %d after %d", l.Fence(), held.Fence())
	}
}

// TLS with the broker's certificate checked against a CA, and a bearer
// token for a broker with an --auth-file.
func TestTLSAndToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, cert, key := certificates(t, dir)
	token := "go-client-test-token-0123456789"
	sum := sha256.Sum256([]byte(token))
	auth := filepath.Join(dir, "auth")
	if err := os.WriteFile(auth, []byte("payments use token:sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "--tls-cert", cert, "--tls-key", key, "--auth-file", auth)
	ctx, name := bg(t), lockName(t)

	c := dial(t, b.addr, leasehold.WithTLSFiles(ca, "", "", "localhost"), leasehold.WithToken(token))
	lease, err := c.Acquire(ctx, name, leasehold.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select { // renewed over the TLS stream, with the token
	case <-lease.Done():
		t.Fatalf("lost: %v", lease.Err())
	case <-time.After(2 * time.Second):
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	anonymous := dial(t, b.addr, leasehold.WithTLSFiles(ca, "", "", "localhost"))
	_, err = anonymous.Acquire(ctx, name, leasehold.WithWait(0))
	var e *leasehold.Error
	if !errors.As(err, &e) || e.Code != codes.Unauthenticated || strings.Contains(err.Error(), token) {
		t.Fatalf("without the token: %v", err)
	}
	if _, err := leasehold.Dial(b.addr, leasehold.WithToken("has a space")); err == nil || strings.Contains(err.Error(), "has a space") {
		t.Fatalf("a bad token: %v", err)
	}
}

// certificates writes a CA and a broker certificate for localhost and
// 127.0.0.1, signed by it: the CA's, the certificate's and the key's paths.
func certificates(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold go test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	serverKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serverTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	serverDER, err := x509.CreateCertificate(rand.Reader, serverTemplate, caCert, &serverKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(serverKey)
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("broker.pem", "CERTIFICATE", serverDER), write("broker.key", "PRIVATE KEY", keyDER)
}

// The invoice job of the package's documentation, as a program of its own
// outside the repository, built from a copy of this folder alone.
func TestAProgramOutsideTheRepository(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	work := t.TempDir()
	const module = "github.com/leasehold/leasehold/clients/go"
	copyDir(t, ".", filepath.Join(work, "gopath", "src", module))
	program := filepath.Join(work, "gopath", "src", "example.com", "invoices")
	if err := os.MkdirAll(program, 0o755); err != nil {
		t.Fatal(err)
	}
	main := `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	leasehold "` + module + `"
)

func run(ctx context.Context, invoices []string) error {
	client, err := leasehold.Dial(os.Args[1])
	if err != nil {
		return err
	}
	defer client.Close()
	lease, err := client.Acquire(ctx, "invoices/nightly", leasehold.WithTTL(30*time.Second), leasehold.WithWait(0))
	if err != nil {
		return err
	}
	for _, invoice := range invoices {
		if err := lease.Err(); err != nil {
			return err
		}
		fmt.Printf("wrote %s with fence %d\n", invoice, lease.Fence())
	}
	return lease.Release(ctx)
}

func main() {
	if err := run(context.Background(), []string{"INV-1", "INV-2"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`
	if err := os.WriteFile(filepath.Join(program, "main.go"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "invoices")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = program
	if os.Getenv("GO111MODULE") == "off" {
		// Offline, as run-tests.sh runs: GOPATH mode, beside Debian's
		// sources of gRPC and protobuf ($LEASEHOLD_GO_DEPS).
		deps := os.Getenv("LEASEHOLD_GO_DEPS")
		if deps == "" {
			deps = "/usr/share/gocode"
		}
		build.Env = append(os.Environ(), "GOPATH="+filepath.Join(work, "gopath")+":"+deps)
	} else {
		// The module ecosystem: the copy by a replace directive.
		gomod := "module example.com/invoices\n\ngo 1.19\n\nrequire " + module + " v0.0.0\n\nreplace " + module + " => " + filepath.Join(work, "gopath", "src", module) + "\n"
		if err := os.WriteFile(filepath.Join(program, "go.mod"), []byte(gomod), 0o644); err != nil {
			t.Fatal(err)
		}
		tidy := exec.Command("go", "mod", "tidy")
		tidy.Dir = program
		if out, err := tidy.CombinedOutput(); err != nil {
			t.Fatalf("go mod tidy: %v\n%s", err, out)
		}
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, b.addr).CombinedOutput()
	if err != nil {
		t.Fatalf("the program: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "wrote INV-2 with fence") {
		t.Fatalf("the program said: %s", out)
	}
}

// copyDir copies the module's files (not its tests) to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if strings.HasSuffix(p, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, info.Mode())
	})
	if err != nil {
		t.Fatal(fmt.Errorf("copying the module: %w", err))
	}
}

// A semaphore: each permit a lease of its own, with its own fence.
func TestSemaphore(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	one, err := c.Acquire(ctx, name, leasehold.WithLimit(2), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	two, err := c.Acquire(ctx, name, leasehold.WithLimit(2), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	if two.Fence() <= one.Fence() {
		t.Fatalf("fences %d then %d", one.Fence(), two.Fence())
	}
	if _, err := c.Acquire(ctx, name, leasehold.WithLimit(2), leasehold.WithWait(0)); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a third permit: %v", err)
	}
	if d, err := c.Describe(ctx, name); err != nil || d.PermitsHeld != 2 {
		t.Fatalf("describe: %+v %v", d, err)
	}
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := two.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A memory-store broker restarted in place has lost its leases: the
// heartbeat to the new one hears so before the lease's own deadline, which
// the client reports as the store's loss.
func TestABrokerRestartedEmptyLosesTheLease(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	lease, err := c.Acquire(ctx, name, leasehold.WithTTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b.kill()
	startBrokerAt(t, b.addr)
	within(t, lease.Done(), 5*time.Second, "Done after the restart")
	var lost *leasehold.LostError
	if !errors.As(lease.Err(), &lost) || lost.Reason != leasehold.LossStoreLost {
		t.Fatalf("Err: %v", lease.Err())
	}
	if time.Now().After(lease.Deadline()) {
		t.Fatalf("heard only at the deadline")
	}
}
