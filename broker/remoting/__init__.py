"""The broker's network entry: the remoting server (a request arrives in `server`), TLS ports
and their acceptor (`tls`), and the limits on what a connection may hold (`limits`,
`close_log`). Name server and broker both listen through it.
"""
