package leasehold_test

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq"
)

// startPostgres runs a PostgreSQL server of its own (Debian's postgresql
// package: run-tests.sh installs it) in a temporary folder, on a free
// loopback port, with trust authentication, and returns a connection pool
// to its postgres database. As root, the server runs as the postgres user
// (PostgreSQL refuses to run as root), owning the folder.
func startPostgres(t *testing.T) *sql.DB {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		t.Fatal("PostgreSQL's initdb is not in /usr/lib/postgresql/*/bin: install Debian's postgresql package (run-tests.sh does)")
	}
	sort.Slice(bins, func(i, j int) bool { return pgMajor(bins[i]) < pgMajor(bins[j]) })
	binDir := filepath.Dir(bins[len(bins)-1])

	dir, err := os.MkdirTemp("", "leasehold-go-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(binDir, name), args...)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := command("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	port := freePort(t)
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	server := command("postgres", "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = server.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Immediate shutdown: the postmaster stops its backends, then exits.
		_ = server.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = server.Process.Kill()
			<-exited
		}
	})

	db, err := sql.Open("postgres", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=5", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// Polling is for startup only: nothing else tells when the server
	// accepts connections.
	end := time.Now().Add(30 * time.Second)
	for {
		err := db.Ping()
		if err == nil {
			return db
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("postgres exited: %s", b)
		default:
		}
		if time.Now().After(end) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("postgres did not accept connections within 30 s (%v): %s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pgMajor(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}
