//! The client end of the control socket, for the CLI: one request, one response; or a request
//! that opens a stream of event lines.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::wire::protocol::{
    ErrorBody, ErrorCode, PROTOCOL_VERSION, Request, RequestLine, ResponseLine,
};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot reach the guard daemon at {path}: {source} (is it running? `systemctl status guard`; \
         or pass --socket PATH)"
    )]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the guard daemon at {path} closed the connection: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{}", .0.message)]
    Refused(ErrorBody),
}

impl ClientError {
    /// The exit status the CLI gives: 3 when not authorized, 4 when the daemon cannot be
    /// reached, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Refused(ErrorBody {
                code: ErrorCode::Unauthorized,
                ..
            }) => 3,
            ClientError::Connect { .. } | ClientError::Io { .. } => 4,
            ClientError::Refused(_) => 1,
        }
    }
}

pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        let writer = stream.try_clone().map_err(|e| ClientError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Client {
            path: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
        })
    }

    fn io(&self, message: impl ToString) -> ClientError {
        ClientError::Io {
            path: self.path.clone(),
            message: message.to_string(),
        }
    }

    /// Sends `request` and returns the response's result.
    pub fn request(&mut self, request: Request) -> Result<Value, ClientError> {
        let line = serde_json::to_string(&RequestLine {
            v: PROTOCOL_VERSION,
            request,
        })
        .map_err(|e| self.io(e))?;
        self.send_line(&line)?;
        let response = self.next_line()?.ok_or_else(|| self.io("no response"))?;
        let response: ResponseLine = serde_json::from_str(&response).map_err(|e| self.io(e))?;
        match (response.ok, response.error) {
            (true, _) => Ok(response.result.unwrap_or(Value::Null)),
            (false, Some(error)) => Err(ClientError::Refused(error)),
            (false, None) => Err(self.io("a failed response without an error")),
        }
    }

    /// Sends `request` and reads its result as `R`, the type `daemon::wire::responses` (or the
    /// asks, for `prompts` and `watch`) gives it.
    pub fn call<R: serde::de::DeserializeOwned>(
        &mut self,
        request: Request,
    ) -> Result<R, ClientError> {
        let value = self.request(request)?;
        serde_json::from_value(value).map_err(|e| {
            self.io(format!(
                "its answer is not one this guard reads ({e}): is the daemon another version?"
            ))
        })
    }

    pub fn send_line(&mut self, line: &str) -> Result<(), ClientError> {
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        self.writer.write_all(&bytes).map_err(|e| self.io(e))
    }

    /// The next line of a stream; `None` when the daemon closed it.
    pub fn next_line(&mut self) -> Result<Option<String>, ClientError> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(line.trim_end().to_string())),
            Err(e) => Err(self.io(e)),
        }
    }

    /// A second handle on the same connection, to write while another thread reads.
    pub fn writer(&self) -> std::io::Result<UnixStream> {
        self.writer.try_clone()
    }

    /// Splits off the reading half (for a thread that reads a stream).
    pub fn into_reader(self) -> BufReader<UnixStream> {
        self.reader
    }
}
