package leasehold

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// DefaultMaxWait is the broker's default --max-wait: the longest wait one
// Acquire call asks for until the broker says otherwise (its refusal of a
// longer wait names its maximum, max_wait_ms). Longer waits are chains of
// calls that keep their place in line.
const DefaultMaxWait = 5 * time.Minute

// Logger receives the client's warnings (a lost lease, a move to another
// broker). *log.Logger is one.
type Logger interface {
	Printf(format string, args ...interface{})
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...interface{}) {}

// Option configures a Client (Dial).
type Option func(*config) error

type config struct {
	tls         *tls.Config
	tlsSet      bool
	token       string
	timeout     time.Duration
	logger      Logger
	dialOptions []grpc.DialOption
	onAdvice    func(TTLAdvice)
}

// WithTLS connects over TLS with cfg (nil: the system's roots). Put a
// client certificate in cfg.Certificates for a broker with mutual TLS
// (--tls-client-ca), and the name the broker's certificate carries in
// cfg.ServerName when it is not the target's host. An https:// target
// implies TLS with the system's roots.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) error {
		if cfg == nil {
			cfg = &tls.Config{}
		}
		c.tls, c.tlsSet = cfg.Clone(), true
		return nil
	}
}

// WithTLSFiles connects over TLS trusting the CA certificates in the PEM
// file caFile ("" for the system's roots), presenting the client
// certificate and key in certFile and keyFile (both "" for none), and
// expecting the broker's certificate to carry serverName ("" for the
// target's host).
func WithTLSFiles(caFile, certFile, keyFile, serverName string) Option {
	return func(c *config) error {
		cfg := &tls.Config{ServerName: serverName}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return fmt.Errorf("leasehold: CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("leasehold: no PEM certificate in CA file %s", caFile)
			}
			cfg.RootCAs = pool
		}
		if (certFile == "") != (keyFile == "") {
			return errors.New("leasehold: WithTLSFiles: the client certificate and key go together")
		}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				// The paths only: never the files' contents (a key).
				return fmt.Errorf("leasehold: client certificate %s and key %s: %v", certFile, keyFile, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		c.tls, c.tlsSet = cfg, true
		return nil
	}
}

// WithToken sends a bearer token on every call and stream
// (authorization: Bearer <token>), for a broker with an --auth-file. It is
// sent on plaintext connections too (a broker on loopback); anywhere else
// use it with TLS. It never appears in errors or logs.
func WithToken(token string) Option {
	return func(c *config) error {
		if token == "" {
			return errors.New("leasehold: WithToken: empty token")
		}
		for _, r := range token {
			if r < '!' || r > '~' {
				return errors.New("leasehold: WithToken: the token must be visible ASCII without spaces (the token itself is not shown)")
			}
		}
		c.token = token
		return nil
	}
}

// WithTimeout bounds each call (on top of the wait an Acquire asks for):
// default 10 s. A context with a sooner deadline bounds it more.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("leasehold: WithTimeout must be positive")
		}
		c.timeout = d
		return nil
	}
}

// WithLogger sends the client's warnings (lost leases, moves to another
// broker) to l instead of the standard logger; nil silences them.
func WithLogger(l Logger) Option {
	return func(c *config) error {
		if l == nil {
			l = nopLogger{}
		}
		c.logger = l
		return nil
	}
}

// WithDialOptions adds gRPC dial options to every broker's connection,
// after the client's own (which they can override).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) error {
		c.dialOptions = append(c.dialOptions, opts...)
		return nil
	}
}

// bearer is the token's per-call credentials.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// Client is a connection to a Leasehold broker, or to several replicas of
// one (sharing one store). It is safe for concurrent use. One goroutine
// keeps every lease of the client alive over one KeepAlive stream. Close
// it to release its leases and free its connections.
type Client struct {
	brokers *brokers
	timeout time.Duration
	logger  Logger
	keeper  *keeper
	// maxWait: the broker's --max-wait as last learnt (nanoseconds).
	maxWait int64

	mu       sync.Mutex
	closed   bool
	watchers map[*Observer]struct{}
}

// Dial makes a client of the broker at target: "host:port", with an
// optional http:// or https:// scheme (https:// means TLS), or several
// replicas' addresses separated by commas. Calls and the KeepAlive stream
// go to one replica and move on to the next when it cannot be reached; the
// leases then resume there by owner token. Dial does not wait for a
// connection: the first call does.
func Dial(target string, opts ...Option) (*Client, error) {
	cfg := config{timeout: 10 * time.Second, logger: log.Default()}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	scheme, addrs, err := splitTargets(target)
	if err != nil {
		return nil, err
	}
	if scheme == "http" && cfg.tlsSet {
		return nil, errors.New("leasehold: an http:// target is plaintext: use https:// (or no scheme) with WithTLS")
	}
	creds := grpc.WithInsecure()
	if scheme == "https" || cfg.tlsSet {
		t := cfg.tls
		if t == nil {
			t = &tls.Config{}
		}
		creds = grpc.WithTransportCredentials(credentials.NewTLS(t))
	}
	dial := []grpc.DialOption{
		creds,
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{})),
		// gRPC's default reconnect backoff starts at 1 s and grows to 2
		// minutes: far too slow to resume a lease of a few seconds after a
		// broker restart. A connection attempt gets 5 s (TCP, TLS and
		// HTTP/2 handshakes). HTTP/2 pings notice a dead connection that
		// TCP alone would not. (As the Rust, Python and Node.js clients.)
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}
	if cfg.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(cfg.token)))
	}
	dial = append(dial, cfg.dialOptions...)
	b := &brokers{targets: addrs, logger: cfg.logger}
	for _, a := range addrs {
		conn, err := grpc.Dial(a, dial...)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("leasehold: %s: %w", a, err)
		}
		b.conns = append(b.conns, conn)
		b.stubs = append(b.stubs, pb.NewLeaseholdServiceClient(conn))
	}
	c := &Client{brokers: b, timeout: cfg.timeout, logger: cfg.logger, maxWait: int64(DefaultMaxWait), watchers: map[*Observer]struct{}{}}
	c.keeper = newKeeper(c, cfg.onAdvice)
	return c, nil
}

// splitTargets is the scheme ("http", "https" or "") and the addresses of
// a target (comma-separated).
func splitTargets(target string) (string, []string, error) {
	schemes := map[string]bool{}
	var addrs []string
	for _, t := range strings.Split(target, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		s := ""
		for _, p := range []string{"https://", "http://"} {
			if strings.HasPrefix(t, p) {
				s, t = strings.TrimSuffix(p, "://"), t[len(p):]
			}
		}
		schemes[s] = true
		addrs = append(addrs, strings.TrimSuffix(t, "/"))
	}
	if len(addrs) == 0 {
		return "", nil, errors.New("leasehold: no broker address given")
	}
	if schemes["http"] && schemes["https"] {
		return "", nil, errors.New("leasehold: the broker addresses mix http:// and https://: one client is either TLS or plaintext")
	}
	switch {
	case schemes["https"]:
		return "https", addrs, nil
	case schemes["http"]:
		return "http", addrs, nil
	}
	return "", addrs, nil
}

// Targets are the broker addresses, in the order given.
func (c *Client) Targets() []string { return append([]string(nil), c.brokers.targets...) }

// Target is the address calls go to now.
func (c *Client) Target() string {
	i, _ := c.brokers.current()
	return c.brokers.targets[i]
}

func (c *Client) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// Close releases the leases still held (best effort: a broker that cannot
// be reached within 2 s leaves them to expire at their TTL), ends the
// Observe streams and the KeepAlive stream, and closes the connections.
// Calls in flight fail. Close is safe to call more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range c.keeper.snapshot() {
		wg.Add(1)
		go func(l *Lease) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = l.Release(ctx)
		}(l)
	}
	wg.Wait()
	c.mu.Lock()
	c.closed = true
	watchers := c.watchers
	c.watchers = nil
	c.mu.Unlock()
	for w := range watchers {
		w.Close()
	}
	c.keeper.close()
	c.brokers.close()
	return nil
}

// callCtx bounds a call by the client's timeout (plus extra).
func (c *Client) callCtx(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout+extra)
}

// brokers: one connection and stub per replica, and the one calls go to.
type brokers struct {
	targets []string
	conns   []*grpc.ClientConn
	stubs   []pb.LeaseholdServiceClient
	logger  Logger
	cur     int32
}

func (b *brokers) current() (int, pb.LeaseholdServiceClient) {
	i := int(atomic.LoadInt32(&b.cur))
	return i, b.stubs[i]
}

// moveOn: calls go to the replica after the one at i (unless another
// caller moved on already), which is `why` (unreachable, shutting down).
func (b *brokers) moveOn(i int, why string) {
	if len(b.stubs) < 2 {
		return
	}
	next := (i + 1) % len(b.stubs)
	if atomic.CompareAndSwapInt32(&b.cur, int32(i), int32(next)) {
		b.logger.Printf("leasehold: broker %s %s; moving to %s", b.targets[i], why, b.targets[next])
	}
}

// unreachable says whether a call failed because the broker at i could not
// be reached: UNAVAILABLE that the broker did not send (no ErrorInfo, no
// place: the transport's), while its connection is not ready.
func (b *brokers) unreachable(i int, err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.Unavailable || e.fromBroker() {
		return false
	}
	return b.conns[i].GetState() != connectivity.Ready
}

// call runs f on the current replica, moving on to the next while replicas
// cannot be reached (each is tried once). f's error is converted with
// toError.
func (b *brokers) call(ctx context.Context, op string, f func(context.Context, pb.LeaseholdServiceClient) error) error {
	attempts := len(b.stubs)
	for {
		i, stub := b.current()
		err := toError(f(ctx, stub), op, nil)
		if err != nil && attempts > 1 && ctx.Err() == nil && b.unreachable(i, err) {
			b.moveOn(i, "unreachable")
			attempts--
			continue
		}
		return err
	}
}

func (b *brokers) close() {
	for _, c := range b.conns {
		_ = c.Close()
	}
}

// Description is who holds a name, as Describe reports it (never the
// owner token).
type Description struct {
	// Held: an unexpired lease exists on the name (false for a free name
	// and for a semaphore, whose permits have no single holder).
	Held bool
	// Holder is the label given at Acquire (WithHolder).
	Holder string
	// Fence is the current lease's fence.
	Fence uint64
	// Remaining is the time left before the lease expires unless renewed.
	Remaining time.Duration
	// TTL is the TTL the lease was granted or last renewed with.
	TTL time.Duration
	// GrantedAt is when the lease was granted, by the store's clock.
	GrantedAt time.Time
	// Waiters are the callers queued for the name, on every replica.
	Waiters uint64
	// LocalWaiters are those waiting on the replica that answered.
	LocalWaiters uint32
	// LockDelay is the lease's lock-delay.
	LockDelay time.Duration
	// LockDelayRemaining: when not held, what is left of the lock-delay of
	// the lease that ended involuntarily.
	LockDelayRemaining time.Duration
	// PermitsHeld: a semaphore's permits held now.
	PermitsHeld uint64
}

func ms(n uint64) time.Duration { return time.Duration(n) * time.Millisecond }

// QueryOption qualifies Describe and Revoke.
type QueryOption func(*query)

type query struct{ tenant string }

// Tenant asks about another tenant's lock ("@root": the root namespace),
// for a credential with the admin permission (PERMISSION_DENIED
// otherwise). Without it: the caller's own.
func Tenant(tenant string) QueryOption { return func(q *query) { q.tenant = tenant } }

func queryOf(opts []QueryOption) query {
	var q query
	for _, o := range opts {
		o(&q)
	}
	return q
}

// Describe says who holds name (Held is false for a free name).
func (c *Client) Describe(ctx context.Context, name string, opts ...QueryOption) (Description, error) {
	if err := c.check(); err != nil {
		return Description{}, err
	}
	ctx, cancel := c.callCtx(ctx, 0)
	defer cancel()
	var r *pb.DescribeResponse
	err := c.brokers.call(ctx, fmt.Sprintf("describe %q", name), func(ctx context.Context, s pb.LeaseholdServiceClient) (err error) {
		r, err = s.Describe(ctx, &pb.DescribeRequest{Name: name, Tenant: queryOf(opts).tenant})
		return err
	})
	if err != nil {
		return Description{}, err
	}
	d := Description{
		Held: r.Held, Holder: r.Holder, Fence: r.Fence, Remaining: ms(r.RemainingMs), TTL: ms(r.TtlMs),
		Waiters: r.Waiters, LocalWaiters: r.LocalWaiters, LockDelay: ms(r.LockDelayMs),
		LockDelayRemaining: ms(r.LockDelayRemainingMs), PermitsHeld: r.PermitsHeld,
	}
	if r.GrantedAtUnixMs > 0 {
		d.GrantedAt = time.UnixMilli(int64(r.GrantedAtUnixMs))
	}
	return d, nil
}

// CheckFence says whether fence is the fence of the current lease on name,
// and what the current lease's fence is (0: the name is free). For a
// resource that cannot remember the highest fence it has seen; the answer
// can be stale by the time it arrives.
func (c *Client) CheckFence(ctx context.Context, name string, fence uint64) (current bool, currentFence uint64, err error) {
	if err := c.check(); err != nil {
		return false, 0, err
	}
	ctx, cancel := c.callCtx(ctx, 0)
	defer cancel()
	var r *pb.CheckFenceResponse
	err = c.brokers.call(ctx, fmt.Sprintf("check fence of %q", name), func(ctx context.Context, s pb.LeaseholdServiceClient) (err error) {
		r, err = s.CheckFence(ctx, &pb.CheckFenceRequest{Name: name, Fence: fence})
		return err
	})
	if err != nil {
		return false, 0, err
	}
	return r.Current, r.CurrentFence, nil
}

// Revoke ends the current lease on name, whoever holds it, and returns its
// fence: its holder hears it is lost (LossRevoked) at its next heartbeat,
// its lock-delay starts, waiters are woken. An operator's tool: the
// credential needs the admin permission (without an --auth-file, the
// broker must run with --enable-revoke), else PERMISSION_DENIED. NOT_FOUND
// if the name is not held.
func (c *Client) Revoke(ctx context.Context, name string, opts ...QueryOption) (uint64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	ctx, cancel := c.callCtx(ctx, 0)
	defer cancel()
	var r *pb.RevokeResponse
	err := c.brokers.call(ctx, fmt.Sprintf("revoke %q", name), func(ctx context.Context, s pb.LeaseholdServiceClient) (err error) {
		r, err = s.Revoke(ctx, &pb.RevokeRequest{Name: name, Tenant: queryOf(opts).tenant})
		return err
	})
	if err != nil {
		return 0, err
	}
	return r.Fence, nil
}

// releaseToken releases a lease by name and owner token.
func (c *Client) releaseToken(ctx context.Context, name, token string) error {
	ctx, cancel := c.callCtx(ctx, 0)
	defer cancel()
	return c.brokers.call(ctx, fmt.Sprintf("release %q", name), func(ctx context.Context, s pb.LeaseholdServiceClient) error {
		_, err := s.Release(ctx, &pb.ReleaseRequest{Name: name, OwnerToken: token})
		return err
	})
}

// releaseInBackground: best effort, nobody waits (a lease past its local
// deadline may still exist on the broker: the next holder need not wait
// for its TTL).
func (c *Client) releaseInBackground(name, token string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.releaseToken(ctx, name, token)
	}()
}
