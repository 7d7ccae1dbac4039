"""Hostile program templates of the managed languages (Java, Node, C#, Kotlin, Scala, R) for ``hostile_programs``."""

from __future__ import annotations

JAVA = r"""
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

NODE = r"""
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

CSHARP = r"""
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

KOTLIN = r"""
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

SCALA = r"""
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

R = r"""
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
