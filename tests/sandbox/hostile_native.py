"""Hostile program templates of the native languages (C and C++, Go, Rust, D) for ``hostile_programs``."""

from __future__ import annotations

C = r"""
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>

static void report(const char *name, long rc) { printf("%s=%d\n", name, rc < 0 ? errno : 0); fflush(stdout); }
static void *idle(void *arg) { (void)arg; pause(); return NULL; }
static long tcp(const char *ip, int port) {
    struct sockaddr_in a; int s = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a); a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = inet_addr(ip);
    return connect(s, (struct sockaddr *)&a, sizeof a);
}
int main(void) {
    char params[120];
    memset(params, 0, sizeof params);
    report("unshare_user", syscall({NR_unshare}, 0x10000000L));
    report("unshare_mount", syscall({NR_unshare}, 0x00020000L));
    report("mount", syscall({NR_mount}, "none", "/tmp", "tmpfs", 0L, 0L));
    report("ptrace", syscall({NR_ptrace}, 0L, 0L, 0L, 0L));
    report("bpf", syscall({NR_bpf}, 0L, 0L, 0L));
    report("io_uring_setup", syscall({NR_io_uring_setup}, 8L, params));
    report("perf_event_open", syscall({NR_perf_event_open}, 0L, 0L, -1L, -1L, 0L));
    report("keyctl", syscall({NR_keyctl}, 0L, 0L));
    report("setns", syscall({NR_setns}, (long)open("/proc/self/ns/net", O_RDONLY), 0L));
    report("connect_host", tcp("127.0.0.1", {PORT}));
    report("connect_out", tcp("192.0.2.1", 80));
    report("read_secret", open("{SECRET}", O_RDONLY));
    report("read_shadow", open("/etc/shadow", O_RDONLY));
    if (getenv("RS_TEST_SECRET")) report("env_secret", 0); else { errno = ENOENT; report("env_secret", -1); }
    report("write_etc", open("/etc/rs-pwned", O_WRONLY | O_CREAT, 0644));
    report("write_root", open("/rs-pwned", O_WRONLY | O_CREAT, 0644));
    report("write_usr", open("/usr/bin/python3", O_WRONLY | O_APPEND));
    report("setuid", setuid(0));
    pthread_t t; int n = 0;
    while (n < 100000 && pthread_create(&t, NULL, idle, NULL) == 0) n++;
    printf("threads=%d\n", n); fflush(stdout);
    for (;;) fork();
}
"""

GO = r"""
package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

func raw(name string, nr uintptr, a ...uintptr) {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := syscall.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
	fmt.Printf("%s=%d\n", name, int(e))
}

func report(name string, err error) {
	if err == nil {
		fmt.Printf("%s=0\n", name)
	} else {
		fmt.Printf("%s=%q\n", name, err.Error())
	}
}

func main() {
	none, _ := syscall.BytePtrFromString("none")
	tmp, _ := syscall.BytePtrFromString("/tmp")
	fs, _ := syscall.BytePtrFromString("tmpfs")
	params := make([]byte, 120)
	raw("unshare_user", {NR_unshare}, 0x10000000)
	raw("unshare_mount", {NR_unshare}, 0x00020000)
	raw("mount", {NR_mount}, uintptr(unsafe.Pointer(none)), uintptr(unsafe.Pointer(tmp)), uintptr(unsafe.Pointer(fs)))
	raw("ptrace", {NR_ptrace}, 0)
	raw("bpf", {NR_bpf}, 0)
	raw("io_uring_setup", {NR_io_uring_setup}, 8, uintptr(unsafe.Pointer(&params[0])))
	raw("perf_event_open", {NR_perf_event_open}, 0, 0, ^uintptr(0), ^uintptr(0), 0)
	raw("keyctl", {NR_keyctl}, 0, 0)
	f, _ := os.Open("/proc/self/ns/net")
	raw("setns", {NR_setns}, f.Fd(), 0)
	_, err := net.DialTimeout("tcp", "127.0.0.1:{PORT}", 2*time.Second)
	report("connect_host", err)
	_, err = net.DialTimeout("tcp", "192.0.2.1:80", 2*time.Second)
	report("connect_out", err)
	_, err = os.ReadFile("{SECRET}")
	report("read_secret", err)
	_, err = os.ReadFile("/etc/shadow")
	report("read_shadow", err)
	if _, ok := os.LookupEnv("RS_TEST_SECRET"); ok {
		report("env_secret", nil)
	} else {
		report("env_secret", os.ErrNotExist)
	}
	report("write_etc", os.WriteFile("/etc/rs-pwned", []byte("x"), 0o644))
	report("write_root", os.WriteFile("/rs-pwned", []byte("x"), 0o644))
	_, err = os.OpenFile("/usr/bin/python3", os.O_WRONLY|os.O_APPEND, 0)
	report("write_usr", err)
	report("setuid", syscall.Setuid(0))
	forks := 0 // each child runs this program again: a fork bomb, until a start is refused
	for forks < 100000 && exec.Command("/proc/self/exe").Start() == nil {
		forks++
	}
	fmt.Printf("forks=%d\n", forks)
	for i := 0; i < 200; i++ { // then OS threads until the runtime cannot make one (it dies)
		go func() { runtime.LockOSThread(); time.Sleep(time.Hour) }()
	}
	time.Sleep(time.Hour)
}
"""

RUST = r"""
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

extern "C" {
    fn syscall(num: i64, ...) -> i64;
    fn __errno_location() -> *mut i32;
    fn fork() -> i32;
    fn setuid(uid: u32) -> i32;
}

fn raw(name: &str, rc: i64) {
    let e = if rc < 0 { unsafe { *__errno_location() } } else { 0 };
    println!("{}={}", name, e);
    std::io::stdout().flush().unwrap();
}

fn report<T>(name: &str, r: std::io::Result<T>) {
    match r {
        Ok(_) => println!("{}=0", name),
        Err(e) => println!("{}={:?}", name, e.kind()),
    }
}

fn main() {
    let params = [0u8; 120];
    unsafe {
        raw("unshare_user", syscall({NR_unshare}, 0x10000000i64));
        raw("unshare_mount", syscall({NR_unshare}, 0x00020000i64));
        raw("mount", syscall({NR_mount}, b"none\0".as_ptr(), b"/tmp\0".as_ptr(), b"tmpfs\0".as_ptr(), 0i64, 0i64));
        raw("ptrace", syscall({NR_ptrace}, 0i64, 0i64, 0i64, 0i64));
        raw("bpf", syscall({NR_bpf}, 0i64, 0i64, 0i64));
        raw("io_uring_setup", syscall({NR_io_uring_setup}, 8i64, params.as_ptr()));
        raw("perf_event_open", syscall({NR_perf_event_open}, 0i64, 0i64, -1i64, -1i64, 0i64));
        raw("keyctl", syscall({NR_keyctl}, 0i64, 0i64));
        raw("setuid", setuid(0) as i64);
    }
    let host: SocketAddr = "127.0.0.1:{PORT}".parse().unwrap();
    report("connect_host", TcpStream::connect_timeout(&host, Duration::from_secs(2)));
    let out: SocketAddr = "192.0.2.1:80".parse().unwrap();
    report("connect_out", TcpStream::connect_timeout(&out, Duration::from_secs(2)));
    report("read_secret", std::fs::read("{SECRET}"));
    report("read_shadow", std::fs::read("/etc/shadow"));
    match std::env::var("RS_TEST_SECRET") { Ok(_) => println!("env_secret=0"), Err(_) => println!("env_secret=absent") }
    report("write_etc", std::fs::write("/etc/rs-pwned", b"x"));
    report("write_root", std::fs::write("/rs-pwned", b"x"));
    report("write_usr", std::fs::OpenOptions::new().append(true).open("/usr/bin/python3"));
    let mut n = 0;
    while n < 100000 {
        match std::thread::Builder::new().spawn(|| std::thread::sleep(Duration::from_secs(3600))) {
            Ok(_) => n += 1,
            Err(_) => break,
        }
    }
    println!("threads={}", n);
    std::io::stdout().flush().unwrap();
    loop { unsafe { fork(); } }
}
"""

D = r"""
import core.stdc.errno, core.stdc.stdio, core.stdc.stdlib, core.stdc.string;
import core.sys.posix.arpa.inet, core.sys.posix.fcntl, core.sys.posix.netinet.in_, core.sys.posix.pthread;
import core.sys.posix.sys.socket, core.sys.posix.unistd;

extern (C) long syscall(long nr, ...) nothrow @nogc;
extern (C) void* idle(void* arg) nothrow @nogc { pause(); return null; }
void report(const(char)* name, long rc) { printf("%s=%d\n", name, rc < 0 ? errno : 0); fflush(stdout); }
long tcp(const(char)* ip, ushort port) {
    sockaddr_in a; int s = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = inet_addr(ip);
    return connect(s, cast(sockaddr*) &a, a.sizeof);
}
void main() {
    ubyte[120] params;
    report("unshare_user", syscall({NR_unshare}, 0x10000000L));
    report("unshare_mount", syscall({NR_unshare}, 0x00020000L));
    report("mount", syscall({NR_mount}, "none".ptr, "/tmp".ptr, "tmpfs".ptr, 0L, 0L));
    report("ptrace", syscall({NR_ptrace}, 0L, 0L, 0L, 0L));
    report("bpf", syscall({NR_bpf}, 0L, 0L, 0L));
    report("io_uring_setup", syscall({NR_io_uring_setup}, 8L, params.ptr));
    report("perf_event_open", syscall({NR_perf_event_open}, 0L, 0L, -1L, -1L, 0L));
    report("keyctl", syscall({NR_keyctl}, 0L, 0L));
    report("setns", syscall({NR_setns}, cast(long) open("/proc/self/ns/net", O_RDONLY), 0L));
    report("connect_host", tcp("127.0.0.1", {PORT}));
    report("connect_out", tcp("192.0.2.1", 80));
    report("read_secret", open("{SECRET}", O_RDONLY));
    report("read_shadow", open("/etc/shadow", O_RDONLY));
    if (getenv("RS_TEST_SECRET")) report("env_secret", 0); else { errno = ENOENT; report("env_secret", -1); }
    report("write_etc", open("/etc/rs-pwned", O_WRONLY | O_CREAT, 420));
    report("write_root", open("/rs-pwned", O_WRONLY | O_CREAT, 420));
    report("write_usr", open("/usr/bin/python3", O_WRONLY | O_APPEND));
    report("setuid", setuid(0));
    pthread_t t; int n = 0;
    while (n < 100000 && pthread_create(&t, null, &idle, null) == 0) n++;
    printf("threads=%d\n", n); fflush(stdout);
    for (;;) fork();
}
"""
