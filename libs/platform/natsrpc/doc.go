// Package natsrpc is ConfigSync's NATS request-reply, server and client, so every service answers and
// reads requests the same way.
//
// A Server registers its endpoints as nats.go micro endpoints (queue groups, discovery and
// $SRV.PING|INFO|STATS keep working) but answers them off the subscription: each endpoint's handler only
// copies the request and hands it to a Dispatcher, either a Pool (one request per worker, a bounded
// queue) or a Batcher (requests answered in batches, a bounded queue, requests dropped once they waited
// longer than their timeout). Replies are published straight to the request's reply subject, because a
// micro.Request must not be used once its handler returned (micro reads it for $SRV.STATS); the price is
// that $SRV.STATS counts no errors.
//
// Every error reply carries the micro error headers (Nats-Service-Error-Code, and Nats-Service-Error
// made safe by HeaderValue) and the body {"error":{"code","message"}}, so clients can read it either way.
// A handler's error is turned into its protocol code by the server's MapError, the one place where a
// service maps its domain errors. A panic is recovered and answered as internal; a full queue is
// refused at once with unavailable; a reply over the connection's max payload is answered as internal.
//
// Config.Observer, when set, is told how every request ended (reply, error code, dropped or expired, and
// the time since it arrived) and the size of every Batcher batch: libs/platform/metrics turns that into
// Prometheus metrics without this package depending on Prometheus.
//
// A Client sends JSON requests with a timeout; ReplyError is the one parser of error replies.
package natsrpc
