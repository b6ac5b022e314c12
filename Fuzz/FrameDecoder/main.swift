// libFuzzer target for the named ports' frame decoder (Sources/RunLoop/NamedPorts/Internal/
// Frame.swift), built and run by `scripts/fuzz`.
//
// Input: one byte `s`, then the stream. The stream is fed to a decoder in pieces whose
// sizes come from `s` (1...256 bytes, varying), as a socket would deliver it, and to a
// second decoder in one piece. Checked, beyond "no crash, no out-of-bounds access" (the
// address sanitizer):
// - both decoders return the same frames and the same failure: pieces do not matter;
// - every frame returned re-encodes to exactly the bytes it was decoded from, and respects
//   the limits (payload size, reply-name rules);
// - once a decoder fails it keeps failing with the same error;
// - the bytes a decoder buffers never exceed one header, one name and one maximal payload
//   plus the piece just appended.

let limits = Frame.Limits(maximumPayload: 4096)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  if size == 0 { return 0 }
  let input = Array(UnsafeBufferPointer(start: data, count: size))
  let seed = Int(input[0])
  let stream = Array(input[1...])

  var whole = FrameDecoder(limits: limits)
  whole.append(stream)
  let (wholeFrames, wholeFailure) = drain(&whole)

  var pieces = FrameDecoder(limits: limits)
  var pieceFrames: [Frame] = []
  var pieceFailure: FrameError?
  var offset = 0
  var step = 0
  while offset < stream.count && pieceFailure == nil {
    let length = min(stream.count - offset, 1 + (seed &* 31 &+ step &* 17) % 256)
    pieces.append(Array(stream[offset..<offset + length]))
    offset += length
    step += 1
    let (frames, failure) = drain(&pieces)
    pieceFrames += frames
    pieceFailure = failure
    let bound = Frame.headerSize + PortName.maximumLength + limits.maximumPayload + length
    precondition(pieces.bufferedByteCount <= bound, "decoder buffers \(pieces.bufferedByteCount) bytes")
  }
  precondition(pieceFrames == wholeFrames, "frames depend on how the stream was cut")
  precondition(pieceFailure == wholeFailure, "failure depends on how the stream was cut")

  // Re-encoding the frames gives back the stream's prefix they came from.
  var consumed = 0
  for frame in wholeFrames {
    precondition(frame.payload.count <= limits.maximumPayload)
    if let name = frame.replyPortName {
      precondition(frame.kind != .reply)
      precondition((try? PortName.validate(name)) != nil)
    }
    let bytes = frame.encoded()
    precondition(Array(stream[consumed..<consumed + bytes.count]) == bytes, "re-encoding differs")
    consumed += bytes.count
  }
  if let wholeFailure {
    precondition(wholeFailure == whole.failure)
    do {
      _ = try whole.nextFrame()
      preconditionFailure("a failed decoder returned a frame")
    } catch {
      precondition(error == wholeFailure, "a failed decoder changed its error")
    }
  }
  return 0
}

/// Every frame `decoder` can return now, and its failure if it failed.
func drain(_ decoder: inout FrameDecoder) -> ([Frame], FrameError?) {
  var frames: [Frame] = []
  while true {
    do {
      guard let frame = try decoder.nextFrame() else { return (frames, nil) }
      frames.append(frame)
    } catch {
      return (frames, error)
    }
  }
}
