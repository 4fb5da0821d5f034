#!/usr/bin/env python3
"""Rebuilds haproxy-reg-tests/*.cfg from a clone of HAProxy's repository.

    python3 extract-reg-tests.py /path/to/haproxy/.git

Takes the text of each `haproxy hN ... -conf { ... }` block of the regression tests
listed in SELECTED and replaces the vtc macros: `"fd@${X}"` binds by 127.0.0.1:9001,
9002, ... (one port per listener of the vtc, in order), `${X_addr}:${X_port}`,
`${X_addr} ${X_port}` and `${X_sock}` by 127.0.0.1:8001, 8002, ... (one per name; a
name `hN_X` of listener X of instance hN gets that listener's port), `${testdir}` and
`${tmpdir}` by `.`. Environment variables (`${HAPROXY_TEST_TIMEOUT-5s}`,
`$VTC_SOCK_TYPE`) are left alone. Nothing else is changed.
"""
import os
import re
import subprocess
import sys

# vtc path under reg-tests/ (without .vtc), "@" and the instances to take (default: all).
SELECTED = """
balance/balance-rr balance/balance-uri balance/balance-hash-maxqueue
checks/agent-check checks/http-check checks/http-check-expect checks/tcp-check_multiple_ports
checks/4be_1srv_health_checks checks/tls_health_checks checks/unique_id
checks/tcp-check-client-hello@htst
http-rules/http_return http-rules/del_header http-rules/path_and_pathq
http-rules/default_rules@h1 http-rules/map_redirect http-rules/forwarded-header-7239@h1
http-rules/h1or2_to_h1c@h1 http-rules/http_after_response
http-rules/converters_ipmask_concat_strcmp_field_word@h1
stick-table/src_conn_rate http-cookies/cookie_insert_indirect compression/basic
connection/proxy_protocol_send_generic@h1 connection/proxy_protocol_send_unique_id
stream/unique-id stream/test_content_switching@h1 server/from_keyword tcp-rules/default_rules
ssl/ssl_alpn ssl/ssl_errors ssl/ssl_client_auth.vtci log/log_uri
webstats/webstats-scope-and-post-change contrib/prometheus stickiness/lb-services@h1
""".split()

# Test certificates the selected configurations name, from reg-tests/ssl/certs/.
CERTS = """
ca-auth.crt client1.pem client2_expired.pem client3_revoked.pem common.pem crl-auth.pem
set_cafile_client.pem set_cafile_interCA1.crt set_cafile_interCA2.crt set_cafile_rootCA.crt
set_cafile_server.pem
""".split()

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'haproxy-reg-tests')


def git(git_dir, *args):
    return subprocess.run(['git', f'--git-dir={git_dir}', *args], capture_output=True,
                          text=True, check=True).stdout


def blocks(text):
    """(instance, configuration text) for each `haproxy hN ... -conf {` block."""
    out = []
    for m in re.finditer(r'^\s*haproxy\s+(h\w+)\b[^\n]*?-conf\s*\{[ \t]*\n', text, re.M):
        depth, i = 1, m.end()
        while i < len(text):
            if text[i] == '{':
                depth += 1
            elif text[i] == '}':
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out.append((m.group(1), text[m.end():i]))
    return [(inst, body) for inst, body in out if body.strip()]


def convert(git_dir, sha, vtc, want):
    found = blocks(git(git_dir, 'show', f'{sha}:{vtc}'))
    fdports, srvports = {}, {}
    for inst, body in found:
        for m in re.finditer(r'fd@\$\{(\w+)\}', body):
            fdports.setdefault((inst, m.group(1)), 9001 + len(fdports))

    def port(name):
        for (inst, fd), p in fdports.items():
            if name == f'{inst}_{fd}':
                return p
        return srvports.setdefault(name, 8001 + len(srvports))

    stem = vtc[len('reg-tests/'):].rsplit('.', 1)[0].replace('/', '_')
    for inst, body in found:
        if want and inst not in want:
            continue
        fd = lambda m: f'127.0.0.1:{fdports[(inst, m.group(1))]}'
        b = body.rstrip(' \t')
        b = re.sub(r'"\$\{VTC_SOCK_TYPE\}\+fd@\$\{(\w+)\}"', fd, b)
        b = re.sub(r'"\$\{VTC_SOCK_TYPE\}\+\$\{(\w+)_sock\}"', lambda m: f'127.0.0.1:{port(m.group(1))}', b)
        b = re.sub(r'"fd@\$\{(\w+)\}"', fd, b)
        b = re.sub(r'fd@\$\{(\w+)\}', fd, b)
        b = re.sub(r'\$\{(\w+)_addr\}([: ])\$\{\1_port\}', lambda m: f'127.0.0.1{m.group(2)}{port(m.group(1))}', b)
        b = re.sub(r'\$\{(\w+)_sock\}', lambda m: f'127.0.0.1:{port(m.group(1))}', b)
        b = re.sub(r'\$\{(\w+)_addr\}', '127.0.0.1', b)
        b = re.sub(r'\$\{(\w+)_port\}', lambda m: str(port(m.group(1))), b)
        b = b.replace('${testdir}', '.').replace('${tmpdir}', '.')
        left = [v for v in re.findall(r'\$\{(\w+)', b) if v != 'HAPROXY_TEST_TIMEOUT']
        assert not left, (vtc, inst, left)
        name = stem + ('' if len(found) == 1 else f'_{inst}') + '.cfg'
        if vtc.endswith('.vtc'):
            src = f'{vtc} (haproxy {inst})'
        else:
            src = f'{vtc} (haproxy {inst}, included by {vtc[:-1]} with VTC_SOCK_TYPE=stream)'
        header = (f'# From HAProxy {src}, commit {sha};\n'
                  f'# vtc macros replaced by fixed loopback addresses.\n')
        yield name, header + b


def main():
    git_dir = sys.argv[1]
    sha = git(git_dir, 'rev-parse', 'HEAD').strip()
    os.makedirs(os.path.join(OUT, 'certs'), exist_ok=True)
    for sel in SELECTED:
        vtc, _, insts = sel.partition('@')
        path = 'reg-tests/' + vtc + ('' if vtc.endswith('.vtci') else '.vtc')
        for name, text in convert(git_dir, sha, path, set(insts.split(',')) if insts else None):
            with open(os.path.join(OUT, name), 'w') as f:
                f.write(text)
            print(name)
    for cert in CERTS:
        data = subprocess.run(['git', f'--git-dir={git_dir}', 'cat-file', '-p',
                               f'{sha}:reg-tests/ssl/certs/{cert}'], capture_output=True,
                              check=True).stdout
        with open(os.path.join(OUT, 'certs', cert), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
