//! HTTP/1.1 request framing and responses: pure functions over byte buffers, no I/O.
//!
//! Model: [`process`] takes the bytes a connection has received and not yet consumed, answers
//! every complete request in order (pipelining), appends the responses to the output buffer and
//! says how many bytes it consumed and whether the connection must close. Bytes left over are the
//! start of the next request; the caller keeps them and the header-read timer runs while they wait.
//!
//! Rules:
//! - `GET` and `HEAD` get `200` with a small body (no body for `HEAD`); other methods get `405`.
//! - HTTP/1.1 keeps the connection open unless the request says `Connection: close`; HTTP/1.0
//!   closes it unless the request says `Connection: keep-alive`. The response says which.
//! - A malformed request gets `400` and the connection closes; a header block larger than
//!   [`MAX_HEADER_BYTES`], or with more than [`MAX_HEADERS`] fields, gets `431` and closes.
//! - Processing stops at the first response that closes the connection; later bytes are ignored.
//!
//! Given up: request bodies. A request announcing one (`Content-Length` above zero or any
//! `Transfer-Encoding`) is answered and then the connection closes, so framing stays correct
//! without reading the body.

use std::fmt;

use super::date::DATE_LEN;

/// Largest header block (request line and fields) accepted before answering `431`.
pub(crate) const MAX_HEADER_BYTES: usize = 8 * 1024;
/// Largest number of header fields accepted before answering `431`.
pub(crate) const MAX_HEADERS: usize = 32;
/// The body of every `200` response.
pub(crate) const BODY: &[u8] = b"Hello from tickwheel\n";

/// The responses the server can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// 200: a `GET` or `HEAD` was served.
    Ok,
    /// 400: the request could not be parsed.
    BadRequest,
    /// 405: a method other than `GET` or `HEAD`.
    MethodNotAllowed,
    /// 408: the header was not received in time (sent just before closing).
    RequestTimeout,
    /// 431: the header block is too large.
    HeaderTooLarge,
}

impl Status {
    fn line(self) -> &'static [u8] {
        match self {
            Status::Ok => b"HTTP/1.1 200 OK\r\n",
            Status::BadRequest => b"HTTP/1.1 400 Bad Request\r\n",
            Status::MethodNotAllowed => b"HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\n",
            Status::RequestTimeout => b"HTTP/1.1 408 Request Timeout\r\n",
            Status::HeaderTooLarge => b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
        }
    }

    fn body(self) -> &'static [u8] {
        match self {
            Status::Ok => BODY,
            Status::BadRequest => b"bad request\n",
            Status::MethodNotAllowed => b"method not allowed\n",
            Status::RequestTimeout => b"request header timeout\n",
            Status::HeaderTooLarge => b"request header fields too large\n",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = self.line();
        let text = &line[b"HTTP/1.1 ".len()..line.iter().position(|&b| b == b'\r').unwrap_or(0)];
        f.write_str(std::str::from_utf8(text).unwrap_or("?"))
    }
}

/// Appends a complete response to `out`. `head` omits the body (for `HEAD`), keeping its length.
pub(crate) fn write_response(
    out: &mut Vec<u8>,
    status: Status,
    keep_alive: bool,
    head: bool,
    date: &[u8; DATE_LEN],
) {
    let body = status.body();
    out.extend_from_slice(status.line());
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\nContent-Type: text/plain\r\nContent-Length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(if keep_alive {
        b"\r\nConnection: keep-alive\r\n\r\n".as_slice()
    } else {
        b"\r\nConnection: close\r\n\r\n".as_slice()
    });
    if !head {
        out.extend_from_slice(body);
    }
}

/// What [`process`] did with a buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Bytes consumed from the front of the input (complete requests only, unless `close`).
    pub(crate) consumed: usize,
    /// Requests answered with `200`.
    pub(crate) served: u64,
    /// Requests answered with 400, 405 or 431.
    pub(crate) rejected: u64,
    /// The last response closes the connection; nothing after it is read.
    pub(crate) close: bool,
}

impl Outcome {
    /// Requests answered, whatever the status.
    pub(crate) fn answered(&self) -> u64 {
        self.served + self.rejected
    }
}

/// One parsed request head, reduced to what the server acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    len: usize,
    method: Method,
    keep_alive: bool,
    has_body: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Head,
    Other,
}

/// The result of looking at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Request(Head),
    Partial,
    Reject(Status),
}

/// Answers every complete request at the front of `input`, appending responses to `out`.
pub(crate) fn process(input: &[u8], out: &mut Vec<u8>, date: &[u8; DATE_LEN]) -> Outcome {
    let mut outcome = Outcome::default();
    while outcome.consumed < input.len() {
        match step(&input[outcome.consumed..]) {
            Step::Partial => break,
            Step::Reject(status) => {
                write_response(out, status, false, false, date);
                outcome.rejected += 1;
                outcome.consumed = input.len();
                outcome.close = true;
                break;
            }
            Step::Request(head) => {
                let (status, keep_alive) = answer(head);
                let is_head = head.method == Method::Head;
                write_response(out, status, keep_alive, is_head, date);
                if status == Status::Ok {
                    outcome.served += 1;
                } else {
                    outcome.rejected += 1;
                }
                outcome.consumed += head.len;
                if !keep_alive {
                    outcome.close = true;
                    break;
                }
            }
        }
    }
    outcome
}

/// Chooses the status and whether the connection stays open for one parsed request.
fn answer(head: Head) -> (Status, bool) {
    let status = match head.method {
        Method::Get | Method::Head => Status::Ok,
        Method::Other => Status::MethodNotAllowed,
    };
    (status, head.keep_alive && !head.has_body)
}

/// Parses the request at the front of `buf`.
fn step(buf: &[u8]) -> Step {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEADER_BYTES => {
            Step::Reject(Status::HeaderTooLarge)
        }
        Ok(httparse::Status::Complete(len)) => head_of(&req, len),
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEADER_BYTES => {
            Step::Reject(Status::HeaderTooLarge)
        }
        Ok(httparse::Status::Partial) => Step::Partial,
        Err(httparse::Error::TooManyHeaders) => Step::Reject(Status::HeaderTooLarge),
        Err(_) => Step::Reject(Status::BadRequest),
    }
}

fn head_of(req: &httparse::Request<'_, '_>, len: usize) -> Step {
    let method = match req.method {
        Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        _ => Method::Other,
    };
    let http11 = req.version == Some(1);
    let mut keep_alive = http11;
    let mut has_body = false;
    for field in req.headers.iter() {
        if field.name.eq_ignore_ascii_case("connection") {
            keep_alive = connection_keeps_alive(field.value, keep_alive);
        } else if field.name.eq_ignore_ascii_case("content-length") {
            match parse_content_length(field.value) {
                Some(n) => has_body |= n > 0,
                None => return Step::Reject(Status::BadRequest),
            }
        } else if field.name.eq_ignore_ascii_case("transfer-encoding") {
            has_body = true;
        }
    }
    Step::Request(Head {
        len,
        method,
        keep_alive,
        has_body,
    })
}

/// Applies the tokens of a `Connection` header to the default (`close` wins over `keep-alive`).
fn connection_keeps_alive(value: &[u8], default: bool) -> bool {
    let mut keep = default;
    for token in value.split(|&b| b == b',') {
        let token = token.trim_ascii();
        if token.eq_ignore_ascii_case(b"close") {
            return false;
        }
        if token.eq_ignore_ascii_case(b"keep-alive") {
            keep = true;
        }
    }
    keep
}

/// Parses a `Content-Length` value: ASCII digits only, no overflow.
fn parse_content_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        let d = (b as char).to_digit(10)?;
        acc.checked_mul(10)?.checked_add(u64::from(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (Outcome, String) {
        let mut out = Vec::new();
        let outcome = process(input, &mut out, b"Sun, 06 Nov 1994 08:49:37 GMT");
        (outcome, String::from_utf8(out).unwrap())
    }

    #[test]
    fn one_get_keeps_alive() {
        let (o, out) = run(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!((o.served, o.close, o.consumed), (1, false, 27));
        assert!(out.starts_with("HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"));
        assert!(out.contains("Connection: keep-alive"));
        assert!(out.ends_with("Hello from tickwheel\n"));
    }

    #[test]
    fn pipelined_requests_are_answered_in_order_and_partial_tail_is_left() {
        let input = b"GET /a HTTP/1.1\r\n\r\nHEAD /b HTTP/1.1\r\n\r\nGET /c HTT";
        let (o, out) = run(input);
        assert_eq!(o.served, 2);
        assert_eq!(o.consumed, input.len() - b"GET /c HTT".len());
        assert_eq!(out.matches("200 OK").count(), 2);
        assert_eq!(out.matches("Hello").count(), 1, "HEAD has no body");
    }

    #[test]
    fn connection_close_stops_processing() {
        let (o, out) = run(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n");
        assert_eq!((o.served, o.close), (1, true));
        assert!(out.contains("Connection: close"));
    }

    #[test]
    fn http10_closes_unless_asked() {
        assert!(run(b"GET / HTTP/1.0\r\n\r\n").0.close);
        assert!(
            !run(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .0
                .close
        );
    }

    #[test]
    fn malformed_gets_400_and_close() {
        let (o, out) = run(b"NOT A REQUEST\r\n\r\n");
        assert_eq!((o.rejected, o.close), (1, true));
        assert!(out.starts_with("HTTP/1.1 400 "));
    }

    #[test]
    fn oversized_header_gets_431() {
        let mut req = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        req.resize(MAX_HEADER_BYTES + 10, b'a');
        let (o, out) = run(&req);
        assert!(o.close);
        assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    }

    #[test]
    fn too_many_fields_gets_431() {
        let mut req = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            req.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        assert!(run(&req).1.starts_with("HTTP/1.1 431 "));
    }

    #[test]
    fn other_methods_get_405_and_bodies_close() {
        let (o, out) = run(b"DELETE / HTTP/1.1\r\n\r\n");
        assert_eq!((o.rejected, o.close), (1, false));
        assert!(out.starts_with("HTTP/1.1 405 "));
        assert!(
            run(b"GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
                .0
                .close
        );
        assert!(
            run(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n")
                .1
                .contains(" 400 ")
        );
    }

    #[test]
    fn content_length_parsing() {
        assert_eq!(parse_content_length(b" 42 "), Some(42));
        assert_eq!(parse_content_length(b""), None);
        assert_eq!(parse_content_length(b"-1"), None);
        assert_eq!(parse_content_length(b"99999999999999999999999"), None);
    }

    #[test]
    fn status_display_is_the_reason_phrase() {
        assert_eq!(
            Status::HeaderTooLarge.to_string(),
            "431 Request Header Fields Too Large"
        );
        assert_eq!(
            Status::MethodNotAllowed.to_string(),
            "405 Method Not Allowed"
        );
    }
}
