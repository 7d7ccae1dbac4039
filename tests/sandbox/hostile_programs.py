"""Hostile programs in C, C++, Go, Rust, Java, Node, D, C# (mono), Kotlin, Scala and R, for
``test_language_containment``.

Each one first probes the sandbox and prints ``name=result`` per attempt, where ``0`` means the attempt
WORKED (what must never happen) and anything else is why it failed (an errno or an exception's name): raw
syscalls (unshare, mount, ptrace, bpf, io_uring, perf_event_open, keyctl, setns) where the language can make
them, a connection to a listener on the host's loopback and an outbound one, a host file named by a secret
and /etc/shadow, the worker's environment, writes outside the work dir, setuid. Then it starts threads until
it is refused (``threads=N``) and forks until the run's deadline (a fork bomb; Go forks first, then makes
OS threads until its runtime dies). Templates take ``{PORT}``,
``{SECRET}`` (a host path) and the syscall numbers ``{NR_<name>}`` of the machine.
"""

from __future__ import annotations

from collections.abc import Mapping

_C = r"""
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

_GO = r"""
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

_RUST = r"""
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

_JAVA = r"""
import java.io.*;
import java.net.*;
import java.nio.file.*;
import java.util.*;

public class Main {
    interface Attempt { void run() throws Exception; }

    static void report(String name, Attempt a) {
        try { a.run(); System.out.println(name + "=0"); }
        catch (Throwable e) { System.out.println(name + "=" + e.getClass().getSimpleName()); }
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        report("connect_host", () -> new Socket().connect(new InetSocketAddress("127.0.0.1", {PORT}), 2000));
        report("connect_out", () -> new Socket().connect(new InetSocketAddress("192.0.2.1", 80), 2000));
        report("read_secret", () -> Files.readAllBytes(Paths.get("{SECRET}")));
        report("read_shadow", () -> Files.readAllBytes(Paths.get("/etc/shadow")));
        report("env_secret", () -> {
            if (System.getenv("RS_TEST_SECRET") == null) throw new NoSuchElementException();
        });
        report("write_etc", () -> Files.write(Paths.get("/etc/rs-pwned"), new byte[] {1}));
        report("write_root", () -> Files.write(Paths.get("/rs-pwned"), new byte[] {1}));
        report("write_usr", () -> new FileOutputStream("/usr/bin/python3", true).close());
        report("unshare_user", () -> {
            Process p = new ProcessBuilder("unshare", "-U", "true").start();
            if (p.waitFor() != 0) throw new IOException("exit " + p.exitValue());
        });
        int n = 0;
        try {
            while (n < 100000) {
                Thread t = new Thread(() -> { try { Thread.sleep(3600000); } catch (InterruptedException e) { } });
                t.setDaemon(true);
                t.start();
                n++;
            }
        } catch (Throwable e) { }
        System.out.println("threads=" + n);
        System.out.flush();
        List<Process> children = new ArrayList<>();
        while (true) {
            try { children.add(new ProcessBuilder("sleep", "3600").start()); } catch (Throwable e) { }
        }
    }
}
"""

_NODE = r"""
const fs = require('fs');
const net = require('net');
const cp = require('child_process');

function report(name, fn) {
  try { fn(); console.log(name + '=0'); } catch (e) { console.log(name + '=' + (e.code || e.name)); }
}

async function connect(name, host, port) {
  await new Promise((resolve) => {
    const s = net.connect({ host, port, timeout: 2000 });
    s.on('connect', () => { console.log(name + '=0'); s.destroy(); resolve(); });
    s.on('timeout', () => { console.log(name + '=TIMEOUT'); s.destroy(); resolve(); });
    s.on('error', (e) => { console.log(name + '=' + e.code); resolve(); });
  });
}

(async () => {
  await connect('connect_host', '127.0.0.1', {PORT});
  await connect('connect_out', '192.0.2.1', 80);
  report('read_secret', () => fs.readFileSync('{SECRET}'));
  report('read_shadow', () => fs.readFileSync('/etc/shadow'));
  report('env_secret', () => { if (!('RS_TEST_SECRET' in process.env)) throw { code: 'ENOENT' }; });
  report('write_etc', () => fs.writeFileSync('/etc/rs-pwned', 'x'));
  report('write_root', () => fs.writeFileSync('/rs-pwned', 'x'));
  report('write_usr', () => fs.closeSync(fs.openSync('/usr/bin/python3', 'a')));
  report('setuid', () => process.setuid(0));
  report('unshare_user', () => cp.execFileSync('unshare', ['-U', 'true'], { stdio: 'ignore' }));
  const { Worker } = require('worker_threads');
  let n = 0;
  for (; n < 200; n++) {
    try { new Worker('setInterval(() => {}, 1000)', { eval: true }); } catch (e) { break; }
  }
  console.log('threads=' + n);
  for (;;) {
    try { cp.spawn('sleep', ['3600'], { stdio: 'ignore' }).on('error', () => {}); } catch (e) { }
  }
})();
"""

_D = r"""
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

_CSHARP = r"""
using System.Diagnostics;
using System.Net.Sockets;
using System.Runtime.InteropServices;

public class Program {
    [DllImport("libc", SetLastError = true)]
    static extern long syscall(long nr, long a, long b, long c, long d, long e);
    [DllImport("libc", SetLastError = true)] static extern int setuid(int uid);
    [DllImport("libc", SetLastError = true)] static extern int fork();
    static void Report(string name, long rc) {
        Console.WriteLine(name + "=" + (rc < 0 ? Marshal.GetLastWin32Error() : 0)); Console.Out.Flush();
    }
    static void Try(string name, Action act) {
        try { act(); Console.WriteLine(name + "=0"); }
        catch (Exception e) { Console.WriteLine(name + "=" + e.GetType().Name); }
        Console.Out.Flush();
    }
    public static void Main() {
        Report("unshare_user", syscall({NR_unshare}, 0x10000000L, 0, 0, 0, 0));
        Report("unshare_mount", syscall({NR_unshare}, 0x00020000L, 0, 0, 0, 0));
        Report("ptrace", syscall({NR_ptrace}, 0, 0, 0, 0, 0));
        Report("bpf", syscall({NR_bpf}, 0, 0, 0, 0, 0));
        Report("perf_event_open", syscall({NR_perf_event_open}, 0, 0, -1, -1, 0));
        Report("keyctl", syscall({NR_keyctl}, 0, 0, 0, 0, 0));
        Try("connect_host", () => new TcpClient().Connect("127.0.0.1", {PORT}));
        Try("connect_out", () => {
            if (!new TcpClient().ConnectAsync("192.0.2.1", 80).Wait(2000)) throw new TimeoutException();
        });
        Try("read_secret", () => File.ReadAllText("{SECRET}"));
        Try("read_shadow", () => File.ReadAllText("/etc/shadow"));
        Try("env_secret", () => {
            if (Environment.GetEnvironmentVariable("RS_TEST_SECRET") == null) throw new KeyNotFoundException();
        });
        Try("write_etc", () => File.WriteAllText("/etc/rs-pwned", "x"));
        Try("write_root", () => File.WriteAllText("/rs-pwned", "x"));
        Try("write_usr", () => File.AppendAllText("/usr/bin/python3", "x"));
        Report("setuid", setuid(0));
        int n = 0;
        try { for (; n < 100000; n++) new Thread(() => Thread.Sleep(-1)) { IsBackground = true }.Start(); }
        catch (Exception) { }
        Console.WriteLine("threads=" + n); Console.Out.Flush();
        for (;;) fork();
    }
}
"""

_KOTLIN = r"""
import java.io.*
import java.net.*
import java.nio.file.*

fun report(name: String, attempt: () -> Unit) {
    try { attempt(); println(name + "=0") } catch (e: Throwable) { println(name + "=" + e.javaClass.simpleName) }
    System.out.flush()
}
report("connect_host") { Socket().connect(InetSocketAddress("127.0.0.1", {PORT}), 2000) }
report("connect_out") { Socket().connect(InetSocketAddress("192.0.2.1", 80), 2000) }
report("read_secret") { Files.readAllBytes(Paths.get("{SECRET}")) }
report("read_shadow") { Files.readAllBytes(Paths.get("/etc/shadow")) }
report("env_secret") { if (System.getenv("RS_TEST_SECRET") == null) throw NoSuchElementException() }
report("write_etc") { Files.write(Paths.get("/etc/rs-pwned"), byteArrayOf(1)) }
report("write_root") { Files.write(Paths.get("/rs-pwned"), byteArrayOf(1)) }
report("write_usr") { FileOutputStream("/usr/bin/python3", true).close() }
report("unshare_user") {
    val p = ProcessBuilder("unshare", "-U", "true").start()
    if (p.waitFor() != 0) throw IOException("exit " + p.exitValue())
}
var n = 0
try {
    while (n < 100000) {
        val t = Thread { try { Thread.sleep(3600000) } catch (e: InterruptedException) { } }
        t.isDaemon = true
        t.start()
        n++
    }
} catch (e: Throwable) { }
println("threads=" + n)
System.out.flush()
val children = ArrayList<Process>()
while (true) {
    try { children.add(ProcessBuilder("sleep", "3600").start()) } catch (e: Throwable) { }
}
"""

_SCALA = r"""
import java.io._
import java.net._
import java.nio.file._

object Main {
  def report(name: String)(attempt: => Any): Unit = {
    try { attempt; println(name + "=0") } catch { case e: Throwable => println(name + "=" + e.getClass.getSimpleName) }
    System.out.flush()
  }
  def main(args: Array[String]): Unit = {
    report("connect_host") { new Socket().connect(new InetSocketAddress("127.0.0.1", {PORT}), 2000) }
    report("connect_out") { new Socket().connect(new InetSocketAddress("192.0.2.1", 80), 2000) }
    report("read_secret") { Files.readAllBytes(Paths.get("{SECRET}")) }
    report("read_shadow") { Files.readAllBytes(Paths.get("/etc/shadow")) }
    report("env_secret") { if (System.getenv("RS_TEST_SECRET") == null) throw new NoSuchElementException() }
    report("write_etc") { Files.write(Paths.get("/etc/rs-pwned"), Array[Byte](1)) }
    report("write_root") { Files.write(Paths.get("/rs-pwned"), Array[Byte](1)) }
    report("write_usr") { new FileOutputStream("/usr/bin/python3", true).close() }
    report("unshare_user") {
      val p = new ProcessBuilder("unshare", "-U", "true").start()
      if (p.waitFor() != 0) throw new IOException("exit " + p.exitValue())
    }
    var n = 0
    try {
      while (n < 100000) {
        val t = new Thread(new Runnable {
          def run(): Unit = try Thread.sleep(3600000) catch { case _: InterruptedException => }
        })
        t.setDaemon(true)
        t.start()
        n += 1
      }
    } catch { case _: Throwable => }
    println("threads=" + n)
    System.out.flush()
    val children = new java.util.ArrayList[Process]()
    while (true) {
      try children.add(new ProcessBuilder("sleep", "3600").start()) catch { case _: Throwable => }
    }
  }
}
"""

_R = r"""
report <- function(name, attempt) {
  r <- tryCatch({ force(attempt); "0" }, error = function(e) class(e)[1], warning = function(w) class(w)[1])
  cat(name, "=", r, "
", sep = "")
  flush(stdout())
}
report("connect_host", socketConnection("127.0.0.1", port = {PORT}, blocking = TRUE, open = "r+", timeout = 2))
report("connect_out", socketConnection("192.0.2.1", port = 80, blocking = TRUE, open = "r+", timeout = 2))
report("read_secret", readLines("{SECRET}"))
report("read_shadow", readLines("/etc/shadow"))
report("env_secret", if (Sys.getenv("RS_TEST_SECRET") == "") stop("unset"))
report("write_etc", writeLines("x", "/etc/rs-pwned"))
report("write_root", writeLines("x", "/rs-pwned"))
report("write_usr", cat("x", file = "/usr/bin/python3", append = TRUE))
report("unshare_user", if (system2("unshare", c("-U", "true")) != 0) stop("refused"))
repeat try(parallel::mcparallel(Sys.sleep(3600)), silent = TRUE)
"""

#: The probe every language makes (names), beyond its own extras.
COMMON = ("connect_host", "connect_out", "read_secret", "read_shadow", "env_secret", "write_etc", "write_root",
          "write_usr")  # fmt: skip
RAW = ("unshare_user", "unshare_mount", "mount", "ptrace", "bpf", "io_uring_setup", "perf_event_open", "keyctl")

HOSTILE: dict[str, tuple[str, tuple[str, ...]]] = {
    "c": (_C, (*COMMON, *RAW, "setns", "setuid")),
    "cpp": (_C, (*COMMON, *RAW, "setns", "setuid")),
    "go": (_GO, (*COMMON, *RAW, "setns", "setuid")),
    "rust": (_RUST, (*COMMON, *RAW, "setuid")),
    "java": (_JAVA, (*COMMON, "unshare_user")),
    "javascript": (_NODE, (*COMMON, "setuid", "unshare_user")),
    "d": (_D, (*COMMON, *RAW, "setns", "setuid")),
    "kotlin": (_KOTLIN, (*COMMON, "unshare_user")),
    "scala": (_SCALA, (*COMMON, "unshare_user")),
    "r": (_R, (*COMMON, "unshare_user")),
    "csharp": (
        _CSHARP,
        (*COMMON, "unshare_user", "unshare_mount", "ptrace", "bpf", "perf_event_open", "keyctl", "setuid"),
    ),
}


def hostile_source(language: str, *, port: int, secret: str, numbers: Mapping[str, int]) -> str:
    """The hostile program of ``language`` with this machine's port, secret path and syscall numbers."""
    source = HOSTILE[language][0].replace("{PORT}", str(port)).replace("{SECRET}", secret)
    for name, nr in numbers.items():
        source = source.replace("{NR_" + name + "}", str(nr))
    return source
