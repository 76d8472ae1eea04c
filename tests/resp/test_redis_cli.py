"""A scripted redis-cli session against shelf-resp, in RESP2 and in RESP3
(`redis-cli -3`), compared with what redis-cli prints for Redis."""

import subprocess


def cli(gateway, script, *flags):
    out = subprocess.run(["redis-cli", "-h", gateway.host, "-p", str(gateway.port), "--no-raw",
                          *flags], input=script.encode(), capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode()


def test_scripted_session(gateway):
    script = "\n".join([
        "PING",
        "SET cli:a hello",
        "GET cli:a",
        "SET cli:a world XX",
        "GET cli:a",
        "SET cli:a x NX",
        "SETNX cli:b 1",
        "MGET cli:a cli:b cli:none",
        "EXISTS cli:a cli:b cli:none",
        "STRLEN cli:a",
        "TYPE cli:a",
        "TTL cli:none",
        "SET cli:c v EX 10",
        "DEL cli:a cli:b cli:none",
        "GET cli:a",
        "SELECT 0",
        "NOSUCH 1 2",
        "",
    ])
    assert cli(gateway, script).splitlines() == [
        "PONG",
        "OK",
        '"hello"',
        "OK",
        '"world"',
        "(nil)",
        "(integer) 1",
        '1) "world"',
        '2) "1"',
        "3) (nil)",
        "(integer) 2",
        "(integer) 5",
        "string",
        "(integer) -2",
        "(error) ERR expiry not supported",
        "(integer) 2",
        "(nil)",
        "OK",
        "(error) ERR unknown command 'NOSUCH'",
    ]


def test_resp3_session(gateway):
    out = cli(gateway, "HELLO 3\nSET cli3:k v\nGET cli3:k\nGET cli3:none\nDEL cli3:k\n", "-3")
    lines = out.splitlines()
    assert '1# "server" => "redis"' in lines
    assert '3# "proto" => (integer) 3' in lines
    assert lines[-4:] == ["OK", '"v"', "(nil)", "(integer) 1"]


def test_scan_and_info_from_the_cli(gateway):
    cli(gateway, "MSET cliscan:1 a cliscan:2 b cliscan:3 c\n")
    keys = [k.strip('"') for k in cli(gateway, "", "--scan", "--pattern", "cliscan:*").split()]
    assert sorted(keys) == ["cliscan:1", "cliscan:2", "cliscan:3"]
    info = cli(gateway, "INFO keyspace\n")
    assert "# Keyspace" in info
    assert "db0:keys=" in info
