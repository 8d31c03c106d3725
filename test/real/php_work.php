<?php
// php_work.php - test/real/php.sh's program: PHP's extensions curl, zip and mysqli (each
// loaded with RTLD_DEEPBIND by PHP 8.2-8.4) passing memory to and from their C libraries,
// and the interpreter's own arrays and strings. Prints only what is the same under any
// allocator: lengths, checksums, counts.
$dir = $argv[1];
$rounds = (int)($argv[2] ?? 200);

// curl: libcurl reads a local file through file:// and hands PHP the buffer it grew.
$src = "$dir/data.txt";
$text = '';
for ($i = 0; $i < 20000; $i++) $text .= "line $i " . str_repeat(chr(97 + $i % 26), $i % 40) . "\n";
file_put_contents($src, $text);
$sum = 0;
for ($r = 0; $r < $rounds; $r++) {
    $c = curl_init("file://$src");
    curl_setopt($c, CURLOPT_RETURNTRANSFER, true);
    $got = curl_exec($c);
    $sum = ($sum + crc32($got) + strlen($got)) % 1000000007;
    curl_close($c);
}
echo "curl: $rounds reads of ", strlen($text), " bytes, checksum $sum\n";

// zip: libzip builds an archive of many entries and reads it back.
$zipf = "$dir/t.zip";
$z = new ZipArchive();
$z->open($zipf, ZipArchive::CREATE | ZipArchive::OVERWRITE);
for ($i = 0; $i < 300; $i++) $z->addFromString("e$i.txt", str_repeat("entry $i ", 10 + $i));
$z->close();
$z = new ZipArchive();
$z->open($zipf);
$total = 0;
for ($i = 0; $i < $z->numFiles; $i++) $total += strlen($z->getFromIndex($i));
$z->close();
echo "zip: {$i} entries, $total bytes read back\n";

// mysqli: a handle and its options, no server needed.
$m = mysqli_init();
mysqli_options($m, MYSQLI_OPT_CONNECT_TIMEOUT, 1);
echo "mysqli: handle ", get_class($m), "\n";

// the interpreter's own memory: arrays, strings, json, regular expressions.
$acc = [];
for ($i = 0; $i < 50000; $i++) $acc["k" . ($i * 7919 % 50000)] = str_repeat("v", $i % 100);
ksort($acc);
$j = json_encode($acc);
$back = json_decode($j, true);
$words = preg_split('/\s+/', $text);
echo "arrays: ", count($back), " keys, json ", strlen($j), " bytes, ", count($words), " words\n";
