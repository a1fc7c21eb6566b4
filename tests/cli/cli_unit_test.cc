// The command-line client's pure parts: the SSE parser (pieces of any size, line ends, comments,
// multi-line data, ids for Last-Event-ID), the follow view (Keras lines, the bar, no '\r' off a
// terminal) and the URL parser.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/follow_view.h"
#include "cli/http_client.h"
#include "cli/sse_parser.h"

using namespace pstrain::cli;

namespace {

std::vector<SseEvent> parse_in_pieces(const std::string& stream, size_t piece) {
  std::vector<SseEvent> events;
  SseParser parser([&](const SseEvent& e) { events.push_back(e); });
  for (size_t i = 0; i < stream.size(); i += piece) parser.feed(std::string_view(stream).substr(i, piece));
  return events;
}

}  // namespace

TEST_CASE("SseParser: events whatever the pieces, with comments, CRLF and multi-line data") {
  const std::string stream =
      ": keep-alive\n\n"
      "id: 1\nevent: state\ndata: {\"state\":\"RUNNING\"}\n\n"
      "id: 2\r\nevent: progress\r\ndata: {\"a\":1}\r\n\r\n"
      "id:3\revent:note\rdata:line one\rdata: line two\r\r"
      ": keep-alive\n"
      "data: no id or type\n\n"
      "id: 4\nevent: epoch\ndata: {\"epoch\":1}\n";  // not complete: no blank line yet
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, stream.size()}) {
    CAPTURE(piece);
    const auto events = parse_in_pieces(stream, piece);
    REQUIRE(events.size() == 4);
    CHECK(events[0].id == "1");
    CHECK(events[0].type == "state");
    CHECK(events[0].data == "{\"state\":\"RUNNING\"}");
    CHECK(events[1].id == "2");
    CHECK(events[1].type == "progress");
    CHECK(events[1].data == "{\"a\":1}");
    CHECK(events[2].id == "3");
    CHECK(events[2].type == "note");
    CHECK(events[2].data == "line one\nline two");
    CHECK(events[3].id.empty());
    CHECK(events[3].type == "message");
    CHECK(events[3].data == "no id or type");
  }
  SseParser parser([](const SseEvent&) {});
  parser.feed(stream);
  CHECK(parser.last_event_id() == "3");  // id 4's event has not ended: not yet received
  CHECK(parser.comments() == 2);
  parser.feed("\n");
  CHECK(parser.last_event_id() == "4");
}

TEST_CASE("follow view: Keras epoch lines, and a bar only on a terminal") {
  EpochFigures e{.epoch = 2, .train_loss = 0.29131, .train_accuracy = 0.91406, .test_loss = 0.2001,
                 .test_accuracy = 0.94024, .samples_per_second = 23410.4, .time_ms = 0};
  CHECK(epoch_line(e, 5, 12.34) ==
        "Epoch 2/5 - 12.3s - loss: 0.2913 - accuracy: 0.9141 - test_loss: 0.2001 - test_accuracy: 0.9402 - 23,410 samples/s");
  EpochFigures v = e;
  v.val_loss = 0.25;
  v.val_accuracy = 0.93;
  CHECK(epoch_line(v, 5, -1) == "Epoch 2/5 - loss: 0.2913 - accuracy: 0.9141 - val_loss: 0.2500 - val_accuracy: 0.9300 - "
                                "test_loss: 0.2001 - test_accuracy: 0.9402 - 23,410 samples/s");
  CHECK(with_thousands(1234567.6) == "1,234,568");
  CHECK(with_thousands(999) == "999");
  CHECK(progress_bar(1250, 2345, 7.2, 0.31214) == "1250/2345 [==============>...............] - ETA: 8s - loss: 0.3121");
  CHECK(progress_bar(0, 40, std::nullopt, std::nullopt) == " 0/40 [..............................]");
  CHECK(progress_bar(40, 40, 0.0, std::nullopt) == "40/40 [==============================] - ETA: 0s");

  const JobShape shape{.id = "job-1", .epochs = 2, .steps_per_epoch = 10, .total_steps = 20, .started_ms = 1000};
  for (bool tty : {false, true}) {
    CAPTURE(tty);
    std::ostringstream out;
    FollowView view(out, tty, shape);
    view.progress(0, std::nullopt, 1000);
    view.progress(5, 0.5, 2000);
    view.progress(10, 0.4, 3000);  // the end of epoch 1: 10/10, not 0/10
    e.epoch = 1;
    e.time_ms = 3500;
    view.epoch(e);
    view.epoch(e);  // again (a replay): printed once
    view.progress(15, 0.3, 4000);
    e.epoch = 2;
    e.time_ms = 6000;
    view.epoch(e);
    view.clear_bar();
    const std::string text = out.str();
    CHECK(view.epochs_printed() == 2);
    CHECK(text.find("Epoch 1/2 - 2.5s - ") != std::string::npos);  // from the start at 1000
    CHECK(text.find("Epoch 2/2 - 2.5s - ") != std::string::npos);  // from epoch 1's end at 3500
    CHECK(text.find("Epoch 1/2", text.find("Epoch 1/2") + 1) == std::string::npos);
    if (tty) {
      CHECK(text.find("\r 5/10 [==============>...............] - ETA: 1s - loss: 0.5000") != std::string::npos);
      CHECK(text.find("\r10/10 [==============================]") != std::string::npos);
      CHECK(text.find("\r 5/10 [==============>...............] - ETA: 1s - loss: 0.3000") != std::string::npos);
    } else {
      CHECK(text.find('\r') == std::string::npos);
      CHECK(text.find('[') == std::string::npos);
      CHECK(text.find('\x1b') == std::string::npos);
    }
  }
}

TEST_CASE("base URL: http or https, host, port, path prefix") {
  std::string why;
  auto u = parse_base_url("http://127.0.0.1:18280/", &why);
  REQUIRE(u);
  CHECK(u->host == "127.0.0.1");
  CHECK(u->port == "18280");
  CHECK(u->base.empty());
  CHECK(u->text == "http://127.0.0.1:18280");
  u = parse_base_url("http://coordinator/api", &why);
  REQUIRE(u);
  CHECK(u->port == "80");
  CHECK(u->base == "/api");
  u = parse_base_url("http://[::1]:8080", &why);
  REQUIRE(u);
  CHECK(u->host == "::1");
  CHECK(u->port == "8080");
  CHECK(!u->tls);
  u = parse_base_url("https://x", &why);
  REQUIRE(u);
  CHECK(u->tls);
  CHECK(u->host == "x");
  CHECK(u->port == "443");
  u = parse_base_url("https://localhost:18443/p/", &why);
  REQUIRE(u);
  CHECK(u->tls);
  CHECK(u->port == "18443");
  CHECK(u->base == "/p");
  CHECK(!parse_base_url("ftp://x", &why));
  CHECK(why.find("https://") != std::string::npos);
  CHECK(!parse_base_url("httpss://x", &why));
  CHECK(!parse_base_url("http://:80", &why));
  CHECK(!parse_base_url("http://host:http", &why));
}
