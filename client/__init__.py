"""tidemq's client side; `client.remoting` is the wire codec the broker shares."""
